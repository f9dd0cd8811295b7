"""URLs' secrets kept out of sight: a URL redacted for logs and errors, a driver's message
scrubbed of what it may quote."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, unquote, unquote_plus, urlsplit

# Secrets a URL may carry besides its password: libpq's ``password=`` and ``sslpassword=``
# (the client key's passphrase) in the query, and the ``'password'`` of a client key
# inside pika's ``ssl_options={...}``.
_SECRET_ENTRY = re.compile(r"""((['"])\w*pass(?:word|phrase)\w*\2\s*:\s*[bBrR]*(['"]))(.*?)\3""")


def _secret_key(key: str) -> bool:
    key = key.lower()
    return "password" in key or "passphrase" in key


def _redact_field(field: str) -> str:
    """One ``key=value`` of a query, its value hidden if it is a secret or holds one."""
    key, sep, value = field.partition("=")
    if not sep or not value:
        return field
    if _secret_key(unquote_plus(key)):
        return f"{key}=***"
    decoded = unquote_plus(value)
    masked = _SECRET_ENTRY.sub(lambda m: f"{m[1]}***{m[3]}", decoded)
    return field if masked == decoded else f"{key}={masked}"


def _secrets(url: str) -> list[str]:
    """Every secret in the URL, as written and decoded (libpq does not read "+" as a space,
    pika does), longest first."""
    parts = urlsplit(url)
    found = {parts.password or ""}
    for field in parts.query.split("&"):
        key, _, raw = field.partition("=")
        values = {raw, unquote(raw), unquote_plus(raw)}
        if _secret_key(unquote_plus(key)):
            found |= values
        found |= {m[4] for value in values for m in _SECRET_ENTRY.finditer(value)}
    found |= {unquote(secret) for secret in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def unsplit(parts: SplitResult) -> str:
    """The URL of ``parts``, as ``urlunsplit`` would make it but keeping the ``//`` of a URL
    without a host (``postgresql:///db``, a local socket), which it drops for the schemes
    it does not know."""
    url = f"{parts.scheme}://{parts.netloc}{parts.path}"
    if parts.query:
        url += f"?{parts.query}"
    return url + (f"#{parts.fragment}" if parts.fragment else "")


def redact(url: str) -> str:
    """The URL with its secrets replaced, safe for logs and error messages: its password,
    and in the query ``password=``, ``sslpassword=`` and a ``'password'`` in pika's
    ``ssl_options``."""
    try:
        parts = urlsplit(url)
        netloc, query = parts.netloc, parts.query
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}"
        if query:
            query = "&".join(_redact_field(field) for field in query.split("&"))
        if (netloc, query) == (parts.netloc, parts.query):
            return url
        return unsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "<unparseable URL>"


def slashless(url: str) -> str:
    """``url``, lacking the ``//`` before its authority, with its user and password hidden:
    urlsplit sees neither there for ``redact`` to hide, and a password may hold any of
    ``:/@``, so all before the last ``@`` goes."""
    before, at, after = url.rpartition("@")
    return f"{before.split(':', 1)[0]}:/***@{after}" if at else url


def scrub(message: str, url: str | None) -> str:
    """Remove the URL's secrets (those ``redact`` hides) from a driver's message, should it
    quote them."""
    try:
        secrets = _secrets(url) if url else []
    except ValueError:
        secrets = []
    for secret in secrets:
        message = message.replace(secret, "***")
    return message


def masked(text: str) -> str:
    """``text`` quoted, with whatever URL secrets it may hold hidden."""
    return repr(redact(text) if "://" in text else slashless(text))
