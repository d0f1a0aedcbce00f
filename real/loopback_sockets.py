"""The kernel half of the loopback pin: Cyclone DDS's receive sockets accept datagrams addressed to 127.0.0.1 only.

Cyclone DDS 11.0.1 (the PyPI wheel) binds its unicast receive sockets to 0.0.0.0 whatever the configuration says
(src/core/ddsi/src/ddsi_udp.c: `bind_to_any = true` for DDSI_TRAN_QOS_RECV_UC); <NetworkInterface name="lo"/> only
chooses the address it advertises and sends from. Any host that can route to this machine reaches those sockets.
There is no configuration to bind them to 127.0.0.1, and the sockets cannot be re-bound under Cyclone's epoll set,
so each one gets a classic BPF socket filter (SO_ATTACH_FILTER, no privileges needed) that drops every datagram
whose IPv4 destination is not 127.0.0.1: what the kernel would deliver to a socket bound to 127.0.0.1. A dropped
datagram never reaches Cyclone; the kernel counts it in the socket's `drops` (/proc/net/udp).

Linux only (on other systems `restrict_to_loopback` raises, naming the fix).
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys

SO_ATTACH_FILTER = 26  # <asm-generic/socket.h>; Python's socket module does not export it
_SKF_NET_OFF = -0x100000  # <linux/filter.h>: offsets relative to the network (IP) header
_LOOPBACK = 0x7F000001  # 127.0.0.1, as a BPF absolute load reads it (network byte order)
# ld [net + 16] (IPv4 destination); jeq 127.0.0.1 ? accept : drop
_PROGRAM = (
    (0x20, 0, 0, (_SKF_NET_OFF + 16) & 0xFFFFFFFF),  # BPF_LD | BPF_W | BPF_ABS
    (0x15, 0, 1, _LOOPBACK),  # BPF_JMP | BPF_JEQ | BPF_K
    (0x06, 0, 0, 0xFFFFFFFF),  # BPF_RET | BPF_K: keep the whole datagram
    (0x06, 0, 0, 0),  # BPF_RET | BPF_K: drop
)


def udp_sockets() -> list[tuple[int, str, int]]:
    """(fd, bound IPv4 address, port) of every IPv4 UDP socket this process holds."""
    inodes: dict[str, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            inodes.setdefault(link[8:-1], int(name))
    out = []
    with open("/proc/net/udp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                addr_hex, port_hex = fields[1].split(":")
                addr = socket.inet_ntoa(struct.pack("<I", int(addr_hex, 16)))
                out.append((inodes[fields[9]], addr, int(port_hex, 16)))
    return out


def restrict_to_loopback(ports: range) -> list[int]:
    """Attach the 127.0.0.1-only filter to this process's UDP sockets bound to 0.0.0.0 on `ports`; their ports."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(
            "deploy.loopback=true needs Linux to keep Cyclone DDS's receive sockets off other hosts (Cyclone binds "
            "them to 0.0.0.0); on this system firewall the DDS ports (7400 + 250 * domain_id and up) instead"
        )
    prog = b"".join(struct.pack("HBBI", *ins) for ins in _PROGRAM)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("@HP", len(_PROGRAM), ctypes.addressof(buf))
    done = []
    for fd, addr, port in udp_sockets():
        if addr != "0.0.0.0" or port not in ports:
            continue
        # a duplicate descriptor: closing the Python socket must not close Cyclone's
        with socket.socket(fileno=os.dup(fd)) as s:
            s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        done.append(port)
    return done
