"""A web console on the HTTP port (`/console`): the models, live charts of their work, and a form to try
them. Its page and chart library ship inside the package; nothing is fetched from elsewhere."""

from nereid.frontends.console.app import PREFIX, Console

__all__ = ["PREFIX", "Console"]
