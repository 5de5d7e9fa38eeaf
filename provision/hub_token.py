"""Where the Hugging Face token may travel: over https, or over plain http only to a hub mirror the
user marked trusted (`office_cache_trusted`: an office cache on a network they own), and never
across a redirect to another origin (scheme, host and port).

The download on a host is curl's: it drops a custom `Authorization` header on a redirect to another
host (since 7.58.0, CVE-2018-1000007) or to another scheme or port of the same host (since 7.83.0,
CVE-2022-27776; backported by Debian and Ubuntu), https://curl.se/docs/CVE-2018-1000007.html and
https://curl.se/docs/CVE-2022-27776.html. The bundle builder's is Python's urllib, whose redirect
handler copies every header to wherever the redirect points: SameOriginRedirects drops the token
there.
"""

from __future__ import annotations

import urllib.request
from typing import IO, Any
from urllib.parse import urlsplit

AUTHORIZATION = "Authorization"


def sends_token(url: str, trusted_http: bool) -> bool:
    """Whether the token may be sent to `url`: https always; plain http only when trusted; nothing else
    (a bundle's file:// copy needs none)."""
    scheme = urlsplit(url).scheme.lower()
    return scheme == "https" or (scheme == "http" and trusted_http)


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or default


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, the token kept only where the redirect stays on the same origin."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        redirected = super().redirect_request(req, fp, code, msg, headers, newurl)
        if redirected is not None and origin(newurl) != origin(req.full_url):
            redirected.remove_header(AUTHORIZATION)
        return redirected


OPENER = urllib.request.build_opener(SameOriginRedirects)
