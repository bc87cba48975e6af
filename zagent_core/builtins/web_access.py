"""Which addresses ``fetch_url`` may reach, and reaching exactly the ones that were checked.

A URL a model was given may name, directly or through DNS or a redirect, the machine's own
network: a database on loopback, a router's admin page, the cloud metadata service at
169.254.169.254 that hands out credentials. So every hop is resolved once, every address the
name resolves to is checked, and the connection goes to a checked address (the next one when
one does not take it): the request is sent to the IP literal with the original ``Host``
header and TLS server name (SNI, and the certificate is verified against the name), so a DNS
answer that changes between the check and the connect (rebinding) changes nothing. Proxies from the environment are not used: a proxy
would connect on its own, to whatever the name resolves to there.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import httpx

from zagent_core.config import FetchUrlConfig

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: NAT64's well-known prefix: an IPv6 address in it stands for the IPv4 address of its last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class Refused(Exception):  # noqa: N818 - a refusal, worded for the model, not a failure of zagent's
    """A URL ``fetch_url`` will not fetch; the message says why and what setting changes it."""


def public(address: Address) -> bool:
    """Whether ``address`` is on the public internet: not loopback, link-local (the metadata
    address), private, shared (CGNAT), multicast, reserved or unspecified, whichever way an IPv6
    address carries an IPv4 one (IPv4-mapped, NAT64, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if address.teredo is not None:
            embedded = address.teredo[1]
        if address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return public(embedded)
    return address.is_global and not address.is_multicast


def host_matches(host: str, patterns: list[str]) -> bool:
    """Whether ``host`` is one of ``patterns``: a name or address as written, or ``*.NAME`` for
    every name under NAME (not NAME itself)."""
    host = host.lower().rstrip(".")
    for pattern in (p.lower().rstrip(".") for p in patterns):
        if host == pattern.strip("[]") or pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


@dataclass(frozen=True)
class Target:
    """One hop of a fetch: the URL as given, and the checked addresses it may be fetched from."""

    url: httpx.URL
    addresses: list[Address]

    def send(self, client: httpx.Client, timeout: float) -> httpx.Response:
        """The GET of :attr:`url` (its response streamed), sent to the first of :attr:`addresses`
        that takes the connection, and nowhere else."""
        extensions = {"sni_hostname": self.url.host} if self.url.scheme == "https" else {}
        refused: httpx.ConnectError | None = None
        for address in self.addresses:
            request = client.build_request("GET", self.url.copy_with(host=str(address)), timeout=timeout,
                                           headers={"Host": self.url.netloc.decode("ascii")}, extensions=extensions)
            try:
                return client.send(request, stream=True)
            except httpx.ConnectError as exc:  # a name's IPv6 address unreachable, its IPv4 one is tried
                refused = exc
        assert refused is not None, "a target has at least one address"
        raise refused


def checked_target(url: httpx.URL, settings: FetchUrlConfig) -> Target:
    """``url`` resolved and checked against ``settings``; :class:`Refused` says what is wrong."""
    if url.scheme not in ("http", "https"):
        raise Refused(f"{url} is not an http or https URL; fetch_url fetches only those")
    host = url.host
    if not host:
        raise Refused(f"{url} names no host; give a full URL such as https://example.com/page")
    if host_matches(host, settings.deny_hosts):
        raise Refused(f"{host} is in builtins.fetch_url.deny_hosts of config.json; it is never fetched")
    addresses = _resolved(host, url.port or (443 if url.scheme == "https" else 80))
    if not settings.allow_private and not host_matches(host, settings.allow_hosts):
        for address in addresses:
            if not public(address):
                named = "" if host == str(address) else f" ({host} resolves to it)"
                raise Refused(f"{address}{named} is a private address (loopback, link-local, a private range or the "
                              "cloud metadata address), which fetch_url does not fetch; to reach it, add the host to "
                              "builtins.fetch_url.allow_hosts in config.json (or set allow_private to true)")
    return Target(url, addresses)


def _resolved(host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to, in the resolver's order (an IP literal is itself)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"cannot resolve {host}: {exc}") from None
    addresses: list[Address] = []
    for *_, sockaddr in found:
        # A scoped IPv6 address (fe80::1%eth0) is link-local whatever its scope.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Refused(f"cannot resolve {host}: no address")
    return addresses
