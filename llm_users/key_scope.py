"""Where an API key may go: the hosts given when locust started and those the operator allowed.

A run's key goes only to the host given at start (``--host``, a User class's own ``host``,
the auto-started simulator) or to a host named with ``--llm-api-key-hosts``. A request to any
other host, one typed into the web UI's start form or set on a User class from the web, is
sent without the key (docs/options.md, "The web UI and API keys"): a visitor of the web UI
can point the load anywhere, never the key.

The plugin fixes the list when locust starts (:func:`fix_at_start`): it writes the resolved
entries into the option itself, so a worker gets the master's list with every spawn message
(Locust sends the master's options), and :func:`llm_users.settings.settings_for` reads it
into each :class:`~llm_users.settings.Settings`. The web UI can never write that option
(:mod:`llm_users.webui.guard`). A configuration built without the plugin's start (Locust as a
library, unit tests) has no scope and sends its key to its own host, as before.

An entry is a URL (``https://api.openai.com``: that scheme, host and port) or ``HOST[:PORT]``
(that host on any scheme, and the port when given); ``*`` allows every host.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from llm_users.errors import ConfigError

log = logging.getLogger(__name__)

OPTION = "llm_api_key_hosts"
FLAG = "--llm-api-key-hosts"
ANY = "*"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Entry:
    """One allowed destination: a host, with a scheme and a port where the entry named them."""

    host: str
    scheme: str | None = None
    port: int | None = None

    def matches(self, scheme: str, host: str, port: int) -> bool:
        return (self.host == host and (self.scheme is None or self.scheme == scheme)
                and (self.port is None or self.port == port))

    def text(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.scheme is not None:
            default = _DEFAULT_PORTS.get(self.scheme)
            return f"{self.scheme}://{host}" + ("" if self.port in (None, default) else f":{self.port}")
        return host + ("" if self.port is None else f":{self.port}")


def origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL, the port filled in; None when it is not one."""
    try:
        parts = urlsplit(str(url).strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def parse_entry(text: str) -> Entry:
    """One entry of ``--llm-api-key-hosts``; ConfigError with one line when it is none."""
    t = text.strip()
    if "://" in t:
        o = origin(t)
        if o is None:
            raise ConfigError(f"{FLAG}: {t!r} is not an http:// or https:// URL with a host")
        return Entry(o[1], o[0], o[2])
    try:
        parts = urlsplit("//" + t)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{FLAG}: {t!r} is not HOST[:PORT] or a URL ({e})") from None
    if not parts.hostname or parts.path or parts.query or parts.username:
        raise ConfigError(f"{FLAG}: {t!r} is not HOST[:PORT] or a URL (e.g. api.openai.com, http://gpu-1:8000)")
    return Entry(parts.hostname.lower(), None, port)


@dataclass(frozen=True, slots=True)
class KeyScope:
    """The hosts a key may go to (``any_host``: every one, the operator's ``*``)."""

    entries: tuple[Entry, ...] = ()
    any_host: bool = False

    @classmethod
    def parse(cls, text: str | None) -> KeyScope:
        words = [w.strip() for w in str(text or "").split(",") if w.strip()]
        return cls(tuple(dict.fromkeys(parse_entry(w) for w in words if w != ANY)), any_host=ANY in words)

    def allows(self, url: str | None) -> bool:
        """Whether a request to ``url`` may carry the key."""
        if self.any_host:
            return True
        o = origin(url or "")
        return o is not None and any(e.matches(*o) for e in self.entries)

    def with_hosts(self, urls: Iterable[str | None]) -> KeyScope:
        """This scope and the origins of ``urls`` (each an http(s) URL; others are left out)."""
        more = [Entry(o[1], o[0], o[2]) for u in urls if u and (o := origin(u)) is not None]
        return KeyScope(tuple(dict.fromkeys([*self.entries, *more])), self.any_host)

    def text(self) -> str:
        """The option's value that reads back as this scope."""
        return ",".join([e.text() for e in self.entries] + ([ANY] if self.any_host else []))


def scope_of(options: Any) -> KeyScope | None:
    """The scope a run's options hold, or None when the plugin did not fix one (no options,
    or Locust used as a library: the key then goes to the User's own host, as it always did)."""
    value = getattr(options, OPTION, None) if options is not None else None
    return None if value is None else KeyScope.parse(value)


def fix_at_start(options: Any, host: str | None, user_classes: Iterable[Any]) -> KeyScope | None:
    """Write into ``options`` the hosts the key may go to: ``--llm-api-key-hosts`` as given
    and the hosts given at start (``host`` and each User class's own ``host``). Run once, when
    locust starts, before anything can change the host. Returns the scope (None without options)."""
    if options is None:
        return None
    scope = KeyScope.parse(getattr(options, OPTION, None))
    scope = scope.with_hosts([host, *(getattr(c, "host", None) for c in user_classes)])
    setattr(options, OPTION, scope.text())
    return scope


def add_host(options: Any, url: str) -> None:
    """A host the run itself gave at start after the options were read (the auto-started
    simulator): the key may go there too."""
    if options is not None:
        setattr(options, OPTION, (scope_of(options) or KeyScope()).with_hosts([url]).text())


def withheld_line(host: str | None, key_names: str, scope: KeyScope) -> str:
    """The line that says a request to ``host`` goes without the key, and how to allow it."""
    o = origin(host or "")
    where = Entry(o[1], o[0], o[2]).text() if o else repr(host)
    allowed = scope.text() or "none"
    return (f"the API key ({key_names}) is not sent to {where}: it goes only to the hosts given when locust "
            f"started ({allowed}); to send it there, start locust with {FLAG} {where}")


_warned: set[str] = set()


def warn_withheld(host: str | None, key_names: str, scope: KeyScope) -> None:
    """Log :func:`withheld_line` once per host in this process (each user that starts there
    would say it again)."""
    if (host or "") not in _warned:
        _warned.add(host or "")
        log.warning("locust-llm: %s", withheld_line(host, key_names, scope))
