// The demo's console tab (pgqw.demo.web): the flyer form and the job it made, followed live.
// Loaded after the console's app.js, whose helpers it uses ($, api, badge, timeCell, ...); the form's
// fields are made by the server from the listing payload's JSON Schema (data-kind, data-required).
"use strict";

// Mirrors pgqw.demo.listing.format_price: symbol, grouped major units, minor part only when non-zero.
function formatPrice(minorText, option) {
  if (!/^\d+$/.test(minorText) || !option) return "";
  const exponent = Number(option.dataset.exponent);
  const minor = BigInt(minorText);
  const base = 10n ** BigInt(exponent);
  const major = (minor / base).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const rest = minor % base;
  let text = option.dataset.symbol + major;
  if (rest !== 0n) text += "." + rest.toString().padStart(exponent, "0");
  return text;
}

const flyerForm = {
  pendingKey: null, // kept when a request got no answer, so sending again cannot make a second job
  pollTimer: null,

  init() {
    const f = $("#flyer-form");
    f.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    $("#f-priceMinor").addEventListener("input", () => this.preview());
    $("#f-currency").addEventListener("change", () => this.preview());
    for (const input of $$("[data-payload-field]", f)) {
      input.addEventListener("input", () => {
        this.pendingKey = null; // a different body needs a different key
        this.clearFieldError(input.name);
      });
    }
    this.preview();
  },

  preview() {
    const select = $("#f-currency");
    $("#price-preview").textContent = formatPrice(
      $("#f-priceMinor").value.trim(), select.options[select.selectedIndex]
    );
  },

  fields() {
    return $$("[data-payload-field]", $("#flyer-form"));
  },

  // Numbers are sent as numbers when they look like numbers of their kind, otherwise as typed, so the
  // API (the one validator) can say what is wrong with them. An optional field left empty is left out.
  payload() {
    const out = {};
    for (const input of this.fields()) {
      const text = input.value;
      if (!("required" in input.dataset) && text.trim() === "") continue;
      const kind = input.dataset.kind;
      const t = text.trim();
      if (kind === "integer" && /^-?\d+$/.test(t)) out[input.name] = Number(t);
      else if (kind === "number" && /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) out[input.name] = Number(t);
      else out[input.name] = text;
    }
    return out;
  },

  clearFieldError(name) {
    const el = $(`#err-${name}`);
    if (el) {
      el.hidden = true;
      el.textContent = "";
      el.closest(".field").classList.remove("invalid");
    }
  },

  showErrors(failure) {
    const formError = $("#form-error");
    let placed = 0;
    for (const d of Array.isArray(failure.details) ? failure.details : []) {
      const name = d.field.replace(/^payload\./, "");
      const el = $(`#err-${name}`);
      const input = $(`#f-${name}`);
      if (el && input && "payloadField" in input.dataset) {
        el.textContent = `${input.dataset.label} ${d.problem}.`;
        el.hidden = false;
        el.closest(".field").classList.add("invalid");
        placed += 1;
      }
    }
    if (!placed) {
      formError.textContent = failure.message;
      formError.hidden = false;
    }
  },

  async submit() {
    const button = $("#submit");
    for (const input of this.fields()) this.clearFieldError(input.name);
    $("#form-error").hidden = true;
    button.disabled = true;
    button.textContent = "Sending…";
    this.pendingKey = this.pendingKey || newKey();
    try {
      const { data } = await api("api/jobs", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json", "Idempotency-Key": this.pendingKey },
        body: JSON.stringify({ type: "listing_flyer", payload: this.payload() }),
      });
      this.pendingKey = null;
      this.follow(data);
    } catch (failure) {
      if (failure instanceof ApiFailure) {
        this.pendingKey = null;
        this.showErrors(failure);
      } else {
        const formError = $("#form-error");
        formError.textContent = "The server did not answer. Press the button again to resend the same request.";
        formError.hidden = false;
      }
    } finally {
      button.disabled = false;
      button.textContent = "Make the flyer";
    }
  },

  follow(job) {
    clearTimeout(this.pollTimer);
    $("#job-card").classList.remove("is-empty");
    $("#job-empty").hidden = true;
    $("#job-body").hidden = false;
    this.render(job);
    this.poll(job.id);
  },

  poll(id) {
    this.pollTimer = setTimeout(async () => {
      try {
        const { data } = await api(`api/jobs/${id}`);
        this.render(data);
        if (["succeeded", "dead", "cancelled", "expired"].includes(data.status)) return;
      } catch (_) {
        // Keep following; the server may be restarting.
      }
      this.poll(id);
    }, POLL_MS);
  },

  render(job) {
    badge($("#job-status"), job.status);
    $("#job-id").textContent = job.id;
    $("#job-attempts").textContent = `${job.attempts} of ${job.maxAttempts}`;
    $("#job-created").replaceChildren(timeCell(job.createdAt));
    // Facts with nothing to say yet are hidden rather than shown as a dash.
    const fact = (name, value, render) => {
      $(`#fact-${name}`).hidden = !value;
      if (value) render(value);
    };
    fact("started", job.startedAt, (v) => $("#job-started").replaceChildren(timeCell(v)));
    fact("finished", job.finishedAt, (v) => $("#job-finished").replaceChildren(timeCell(v)));
    fact("next", job.nextAttemptAt, (v) => $("#job-next").replaceChildren(timeCell(v)));
    fact("worker", job.lockedBy, (v) => ($("#job-worker").textContent = v));
    fact("error", job.lastError, () => {
      const earlier = earlierError(job);
      // The label says whose error it is; the text is the error alone.
      $("#job-error-label").textContent = earlier ? "Earlier attempt failed" : "Last error";
      $("#job-error").className = earlier ? "earlier-error" : "error-text";
      $("#job-error").textContent = job.lastError;
    });
    const order = ["pending", "processing", "succeeded"];
    const at = job.status === "failed" ? 0 : order.indexOf(job.status);
    for (const li of $$("#job-steps li")) {
      const i = order.indexOf(li.dataset.step);
      li.classList.toggle("done", at > i || job.status === "succeeded");
      li.classList.toggle("current", at === i && job.status !== "succeeded");
    }
    // The PDF from the demo's own route (inline, named flyer-<id>.pdf); resultUrl serves the same file.
    const link = $("#pdf-link");
    link.hidden = !job.resultUrl;
    if (job.resultUrl) link.href = appUrl(`api/jobs/${job.id}/flyer`);
    const notes = {
      pending: "Waiting for a worker…",
      processing: "A worker is rendering the PDF…",
      failed: "That attempt failed; it will be retried automatically.",
      dead: "The job failed for good. See Dead letters to retry it.",
      succeeded: "Done. The PDF is ready.",
      cancelled: "Cancelled. No flyer will be made.",
    };
    $("#job-note").textContent = notes[job.status] || "";
    // Cancel: a waiting job ends at once; a running one is asked to stop (its worker ends it).
    const cancel = $("#job-cancel");
    cancel.hidden = !["pending", "failed", "processing"].includes(job.status);
    cancel.onclick = () => this.cancel(job.id);
  },

  async cancel(id) {
    const button = $("#job-cancel");
    button.disabled = true;
    try {
      const { data } = await api(`api/jobs/${id}/cancel`, { method: "POST" });
      this.render(data);
      if (data.status === "processing") $("#job-note").textContent = "Asked the worker to stop…";
      refreshStats();
    } catch (failure) {
      $("#job-note").textContent = failure.message || "The cancel did not go through.";
    } finally {
      button.disabled = false;
    }
  },
};

registerTab("make", { init: () => flyerForm.init() });
