"""Cyclone DDS configuration: the loopback pin that tests, benches and dry runs use.

On a shared machine (CI, a laptop on a network with other robots) DDS must not discover or be discovered
by anything else: the loopback profile binds Cyclone DDS to `lo`, turns multicast off and names 127.0.0.1
as the only unicast discovery peer. With multicast off, discovery probes the ports of participant indices
0..max_participants on each peer, so participants take an automatic index.

Users pin the same thing for `ros2` tools with CYCLONEDDS_URI set to this XML (README, "Deploying with
ROS 2"); `python -m robot_rl.real.cyclonedds_config` prints it. The XML only chooses what Cyclone advertises and sends from:
its receive sockets listen on 0.0.0.0 anyway, which real/loopback_sockets.py closes for the node's own process.

`security_xml` is the DDS Security (OMG) section for Cyclone's builtin plugins (authentication, access control,
cryptography), from the six files of deploy.dds_security; docs/security.md.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

LOOPBACK_XML = """<CycloneDDS>
  <Domain id="any">
    <General>
      <Interfaces><NetworkInterface name="lo"/></Interfaces>
      <AllowMulticast>false</AllowMulticast>
    </General>
    <Discovery>
      <ParticipantIndex>auto</ParticipantIndex>
      <MaxAutoParticipantIndex>{max_participants}</MaxAutoParticipantIndex>
      <Peers><Peer address="127.0.0.1"/></Peers>
    </Discovery>{threads}
  </Domain>
</CycloneDDS>"""

# Cyclone's receive and delivery threads carry every joint state into the process: with a real-time control
# loop they get real-time scheduling too, or a busy machine delays the data the loop is waiting for.
_THREAD = """
      <Thread name="{name}"><Scheduling><Class>realtime</Class><Priority>{priority}</Priority></Scheduling></Thread>"""
_RX_THREADS = ("recv", "recvUC", "recvMC", "dq.user", "dq.builtins")


def loopback_xml(max_participants: int = 32, realtime_priority: int = 0) -> str:
    """Cyclone DDS XML that keeps all traffic on 127.0.0.1 (no multicast); receive threads real-time when > 0."""
    threads = ""
    if realtime_priority > 0:
        threads = "\n    <Threads>" + "".join(_THREAD.format(name=n, priority=int(realtime_priority)) for n in _RX_THREADS) + "\n    </Threads>"
    return LOOPBACK_XML.format(max_participants=int(max_participants), threads=threads)


_SECURITY_XML = """<CycloneDDS>
  <Domain id="any">
    <Security>
      <Authentication>
        <Library path="dds_security_auth" initFunction="init_authentication" finalizeFunction="finalize_authentication"/>
        <IdentityCA>{identity_ca}</IdentityCA>
        <IdentityCertificate>{certificate}</IdentityCertificate>
        <PrivateKey>{private_key}</PrivateKey>
      </Authentication>
      <AccessControl>
        <Library path="dds_security_ac" initFunction="init_access_control" finalizeFunction="finalize_access_control"/>
        <PermissionsCA>{permissions_ca}</PermissionsCA>
        <Governance>{governance}</Governance>
        <Permissions>{permissions}</Permissions>
      </AccessControl>
      <Cryptographic>
        <Library path="dds_security_crypto" initFunction="init_crypto" finalizeFunction="finalize_crypto"/>
      </Cryptographic>
    </Security>
  </Domain>
</CycloneDDS>"""


def security_xml(*, identity_ca: str, certificate: str, private_key: str, permissions_ca: str, governance: str,
                 permissions: str) -> str:
    """Cyclone DDS XML enabling DDS Security with these files (PEM certificates and key, S/MIME-signed XML)."""
    files = dict(identity_ca=identity_ca, certificate=certificate, private_key=private_key,
                 permissions_ca=permissions_ca, governance=governance, permissions=permissions)
    # Cyclone reads `file:` URIs as plain paths (no percent-encoding); relative ones would follow the process's cwd
    return _SECURITY_XML.format(**{k: escape("file:" + str(Path(v).resolve())) for k, v in files.items()})


def has_dds_security() -> bool:
    """Whether the Cyclone DDS library Python loaded has DDS Security (the PyPI wheel has none: it rejects <Security>)."""
    from cyclonedds.internal import load_cyclonedds

    # exported by Cyclone's security core (src/security/core), built into libddsc only with ENABLE_SECURITY
    return hasattr(load_cyclonedds(), "DDS_Security_Exception_set")


if __name__ == "__main__":
    print(loopback_xml())
