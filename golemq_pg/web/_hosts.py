"""Which ``Host`` a dashboard answers (the defence against DNS rebinding).

A page on ``attacker.example`` whose name the attacker re-points at 127.0.0.1 reaches a
dashboard on this machine as "same-origin" from the browser's point of view; only the
``Host`` header still says ``attacker.example``. So a request is answered only when its
``Host`` is one the dashboard was told it is reached by.

Starlette's ``TrustedHostMiddleware`` does this check too, but it is not used: the
releases this package supports (``starlette>=0.37``) cut the header at its first colon, so
``[::1]:8080`` is refused, and it has no way to allow IP literals by network, which is what
``golemq-pg web --host 0.0.0.0`` needs (a literal address cannot be rebound: only a name can).

An entry of ``allowed_hosts`` is one of:

* ``"*"``: any host (the check is off);
* a host name, ``"queue.example.com"`` (case and one trailing dot ignored), or
  ``"*.example.com"`` for its subdomains (not the name itself);
* an IP address, ``"10.0.0.5"``, ``"::1"`` or ``"[::1]"``;
* a network of IP addresses, ``"10.0.0.0/8"``: any IP literal inside it (``"0.0.0.0/0"``
  and ``"::/0"``: any address, never a name).

The port of the request's ``Host`` is ignored: a rebinding attack keeps the port.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: What ``allowed_hosts=None`` allows: the loopback names, on any port.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# RFC 9110 Host: uri-host [ ":" port ]; uri-host is an IP literal in brackets, or a reg-name
# (letters, digits and "-._~" here: the percent-encoded and sub-delims forms never name a
# host a browser reaches by DNS, so they are refused rather than interpreted).
_HOST_RE = re.compile(
    r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._~-]+))(?::(?P<port>[0-9]{0,5}))?"
)
_NAME_RE = re.compile(r"[a-z0-9._~-]+")


def parse_host(header: str | None) -> str | IPAddress | None:
    """The host of a ``Host`` header value: an IP address, or a lower-case name without a
    trailing dot; None when the header is missing or malformed."""
    if header is None:
        return None
    match = _HOST_RE.fullmatch(header.strip())
    if match is None:
        return None
    if match["ipv6"] is not None:
        try:
            return ipaddress.IPv6Address(match["ipv6"])
        except ValueError:
            return None
    name: str = match["name"]
    return _address(name) or _name(name)


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _name(text: str) -> str | None:
    name = text.lower()
    if name.endswith("."):
        name = name[:-1]
    return name or None


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The hosts one dashboard answers: see the module docstring."""

    any_host: bool
    names: frozenset[str]
    suffixes: tuple[str, ...]
    addresses: frozenset[IPAddress]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def of(cls, allowed_hosts: Iterable[str] | None) -> HostPolicy:
        """The policy of ``create_app(allowed_hosts=...)`` (``ValueError`` naming a bad
        entry's position, never echoing more than the entry)."""
        if allowed_hosts is None:
            allowed_hosts = LOOPBACK_HOSTS
        elif isinstance(allowed_hosts, str | bytes):
            raise ValueError("allowed_hosts must be a list of host names, not a single string")
        names: set[str] = set()
        suffixes: list[str] = []
        addresses: set[IPAddress] = set()
        networks: list[IPNetwork] = []
        any_host = False
        for index, entry in enumerate(allowed_hosts):
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"allowed_hosts[{index}] must be a non-empty string")
            text = entry.strip()
            shown = repr(text[:100])
            if text == "*":
                any_host = True
                continue
            if "/" in text:
                try:
                    networks.append(ipaddress.ip_network(text, strict=False))
                except ValueError:
                    raise ValueError(
                        f"allowed_hosts entry {shown} is not an IP network such as 10.0.0.0/8"
                    ) from None
                continue
            address = _address(text.removeprefix("[").removesuffix("]"))
            if address is not None:
                addresses.add(address)
                continue
            wildcard = text.startswith("*.")
            name = _name(text[2:] if wildcard else text)
            if name is None or not _NAME_RE.fullmatch(name) or "*" in name:
                raise ValueError(
                    f"allowed_hosts entry {shown} must be a host name ('queue.example.com', "
                    "'*.example.com'), an IP address, a network ('10.0.0.0/8') or '*'"
                )
            if wildcard:
                suffixes.append("." + name)
            else:
                names.add(name)
        return cls(any_host, frozenset(names), tuple(suffixes), frozenset(addresses),
                   tuple(networks))

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header value is answered."""
        if self.any_host:
            return True
        host = parse_host(header)
        if host is None:
            return False
        if isinstance(host, str):
            return host in self.names or host.endswith(self.suffixes)
        if isinstance(host, ipaddress.IPv6Address) and host.ipv4_mapped is not None:
            host = host.ipv4_mapped
        return host in self.addresses or any(
            host.version == net.version and host in net for net in self.networks
        )
