"""Integrations with the frameworks an application already uses: `pgqw.contrib.django`."""
