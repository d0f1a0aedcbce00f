"""Cyclone DDS configuration: the loopback pin that tests, benches and dry runs use.

On a shared machine (CI, a laptop on a network with other robots) DDS must not discover or be discovered
by anything else: the loopback profile binds Cyclone DDS to `lo`, turns multicast off and names 127.0.0.1
as the only unicast discovery peer. With multicast off, discovery probes the ports of participant indices
0..max_participants on each peer, so participants take an automatic index.

Users pin the same thing for `ros2` tools with CYCLONEDDS_URI set to this XML (README, "Deploying with
ROS 2"); `python -m real.cyclonedds_config` prints it.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    print(loopback_xml())
