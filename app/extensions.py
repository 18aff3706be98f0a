"""What a task module may add to the web app, from its own init_app(app) (create_app calls it for each
module of TASK_MODULES that has one, after importing it):

    from pgqw.app import extensions

    def init_app(app):
        app.register_blueprint(my_blueprint)                  # routes of its own
        extensions.add_openapi_paths(app, {"/api/...": {...}})  # documented in /api/openapi.json
        extensions.add_console_tab(app, extensions.ConsoleTab(
            name="make", title="Make one", template="my_tab.html", scripts=(("my_page.static", "tab.js"),),
            context=lambda: {"example": {...}}))

A console tab is a template (found through the blueprint's template_folder) that the page includes as
a section of its own, with a link in the page's tabs, and scripts the page loads after its own
(app/static/app.js: the tab's script calls registerTab(name, {init}) and may use app.js's helpers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from flask import Flask

KEY = "pgqw.web"


@dataclass(frozen=True)
class ConsoleTab:
    name: str  # the view's name: #name, data-view, nav-<name>
    title: str  # the tab's label
    template: str  # a <section class="view" data-view="name" hidden> (see app/templates/index.html)
    scripts: tuple[tuple[str, str], ...] = ()  # (static endpoint, filename), loaded after app.js
    context: Callable[[], dict[str, Any]] = dict  # the template's variables


@dataclass
class WebExtensions:
    openapi_paths: dict[str, Any] = field(default_factory=dict)
    console_tabs: list[ConsoleTab] = field(default_factory=list)


def of(app: Flask) -> WebExtensions:
    found: WebExtensions = app.extensions.setdefault(KEY, WebExtensions())
    return found


def add_openapi_paths(app: Flask, paths: dict[str, Any]) -> None:
    """Path items of the OpenAPI document (their errors as the rest's: app/openapi.py)."""
    of(app).openapi_paths.update(paths)


def add_console_tab(app: Flask, tab: ConsoleTab) -> None:
    of(app).console_tabs.append(tab)
