"""Network posture of the deploy node: the loopback profile keeps other addresses out, the DDS domain is the configured one.

The loopback test sends real datagrams from this machine's non-loopback address to the ports of a loopback-pinned
Cyclone DDS domain and reads the kernel's per-socket drop counters (/proc/net/udp): traffic stays on this host.
"""

from __future__ import annotations

import fcntl
import os
import json
import random
import shutil
import socket
import struct
import subprocess
import sys
import time
import types

import pytest

from robot_rl.real import messages as M
from robot_rl.real.qos import RELIABLE

SIOCGIFADDR = 0x8915
# an RTPS message header (protocol 2.5, vendor 1.16, a GUID prefix) and an INFO_TS submessage: what a participant on
# another host would send to a discovery port
RTPS_DATAGRAM = b"RTPS\x02\x05\x01\x10" + bytes(range(12)) + b"\x09\x01\x08\x00" + bytes(8)


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of one of this machine's other interfaces (eth0, ...), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            addr = socket.inet_ntoa(raw[20:24])
            if not addr.startswith("127."):
                return addr
    return None


def udp_table() -> dict[tuple[str, int], int]:
    """{(bound IPv4 address, port): the kernel's drop count} of this process's UDP sockets (/proc/net/udp)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = {}
    with open("/proc/net/udp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[9] not in inodes:
                continue
            addr_hex, port_hex = fields[1].split(":")
            out[(socket.inet_ntoa(struct.pack("<I", int(addr_hex, 16))), int(port_hex, 16))] = int(fields[12])
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/net/udp and socket filters are Linux's")
def test_loopback_profile_drops_datagrams_sent_to_other_local_addresses():
    from robot_rl.real.transport_dds import DdsTransport

    other = non_loopback_ipv4()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to send from")
    domain = random.randint(100, 199)
    node, peer = DdsTransport(domain, loopback=True), DdsTransport(domain, loopback=True)
    base = 7400 + 250 * domain  # DDSI port mapping: the domain's participants listen on base .. base + 249
    # Cyclone 11.0.1 binds its receive sockets to 0.0.0.0 whatever the XML says (its transmit socket: 127.0.0.1)
    receive_ports = sorted(port for addr, port in udp_table() if addr == "0.0.0.0" and base <= port < base + 250)
    assert len(receive_ports) == 2  # discovery and data (one Cyclone domain per process)
    before = udp_table()
    n = 5
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as outsider, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as local:
        outsider.bind((other, 0))
        local.bind(("127.0.0.1", 0))
        for port in receive_ports:
            for _ in range(n):
                outsider.sendto(RTPS_DATAGRAM, (other, port))
                local.sendto(RTPS_DATAGRAM, ("127.0.0.1", port))
    time.sleep(0.2)
    after = udp_table()
    dropped = {port: after[("0.0.0.0", port)] - before[("0.0.0.0", port)] for port in receive_ports}
    # every datagram to the other address was dropped by the kernel, none of those to 127.0.0.1
    assert dropped == {port: n for port in receive_ports}, dropped

    # DDS between participants on loopback still works
    sub = node.subscribe("/net_test/estop", M.Bool, RELIABLE)
    pub = peer.publisher("/net_test/estop", M.Bool, RELIABLE)
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        pub.publish(M.Bool(data=True))
        node.wait(0.05)
        got = sub.take()
    assert got and got[0][0].data is True
    node.close()
    peer.close()


def test_rclpy_transport_joins_the_configured_domain_with_the_launch_ros_arguments(monkeypatch):
    """With rclpy's API as Humble and Jazzy define it (keyword-only init(args, context, domain_id), create_node(name,
    context=), SingleThreadedExecutor(context=)), the node's own context is initialised with deploy.domain_id and
    the ROS arguments that `ros2 launch` appends; ROS_DOMAIN_ID naming another domain is refused."""
    calls = []

    class Context:
        def __init__(self):
            self.initialised = False

        def ok(self):
            return self.initialised

    default = Context()

    def init(*, args=None, context=None, domain_id=None, signal_handler_options=None):
        context = default if context is None else context
        if context.initialised:
            raise RuntimeError("Context.init() must only be called once")
        context.initialised = True
        calls.append(("init", args, context, domain_id))

    class Node:
        def destroy_node(self):
            pass

    def create_node(node_name, *, context=None, cli_args=None, namespace=None, use_global_arguments=True,
                    enable_rosout=True, start_parameter_services=True, parameter_overrides=None,
                    allow_undeclared_parameters=False, automatically_declare_parameters_from_overrides=False):
        calls.append(("create_node", node_name, default if context is None else context))
        return Node()

    def shutdown(*, context=None, uninstall_handlers=None):
        context = default if context is None else context
        calls.append(("shutdown", context))
        context.initialised = False

    class SingleThreadedExecutor:
        def __init__(self, *, context=None):
            calls.append(("executor", default if context is None else context))

        def add_node(self, node):
            pass

        def spin(self):
            pass

        def shutdown(self, timeout_sec=None):
            return True

    rclpy = types.ModuleType("rclpy")
    rclpy.init, rclpy.create_node, rclpy.shutdown = init, create_node, shutdown
    rclpy.ok = lambda *, context=None: (default if context is None else context).ok()
    mods = {"rclpy": rclpy, "rclpy.context": types.ModuleType("rclpy.context"),
            "rclpy.executors": types.ModuleType("rclpy.executors")}
    mods["rclpy.context"].Context = Context
    mods["rclpy.executors"].SingleThreadedExecutor = SingleThreadedExecutor
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    launched = ["/usr/bin/python3", "/ws/install/robot_rl_ros/lib/robot_rl_ros/robot_rl_deploy", "policy:=/ckpt",
                "--ros-args", "-r", "__node:=robot_rl_deploy", "-r", "/joint_states:=/panda/joint_states"]
    monkeypatch.setattr(sys, "orig_argv", launched)
    from robot_rl.real.transport import make_transport

    t = make_transport("rclpy", name="robot_rl_deploy", domain_id=42)
    t.close()
    (_, args, ctx, domain_id), node, executor, shut = calls
    assert domain_id == 42
    assert args == ["/usr/bin/python3", "--ros-args", "-r", "__node:=robot_rl_deploy", "-r",
                    "/joint_states:=/panda/joint_states"]
    assert node == ("create_node", "robot_rl_deploy", ctx) and executor == ("executor", ctx) and shut == ("shutdown", ctx)

    monkeypatch.setenv("ROS_DOMAIN_ID", "7")
    with pytest.raises(ValueError, match=r"deploy.domain_id=42 but ROS_DOMAIN_ID=7.*domain_id:=7"):
        make_transport("rclpy", name="robot_rl_deploy", domain_id=42)
    monkeypatch.setenv("ROS_DOMAIN_ID", "42")
    make_transport("rclpy", name="robot_rl_deploy", domain_id=42).close()


SECURITY_FILES = ("identity_ca", "certificate", "private_key", "permissions_ca", "governance", "permissions")


def test_dds_security_xml_configures_cyclones_three_plugins_with_every_file(tmp_path):
    """The Security section as Cyclone DDS 11.0.1 reads it (src/core/ddsi/src/ddsi__cfgelems.h): each file as an absolute
    `file:` URI in its element, the builtin plugins named with their entry points; odd characters survive the XML."""
    import xml.etree.ElementTree as ET

    from robot_rl.real.cyclonedds_config import security_xml

    d = tmp_path / "keys & certs <1>"
    d.mkdir()
    files = {k: str(d / f"{k}.pem") for k in SECURITY_FILES}
    root = ET.fromstring(security_xml(**files))
    assert root.tag == "CycloneDDS" and [c.tag for c in root] == ["Domain"] and root[0].attrib == {"id": "any"}
    (sec,) = root[0]
    assert sec.tag == "Security"
    tree = {part.tag: [(el.tag, el.attrib, (el.text or "").strip()) for el in part] for part in sec}
    uri = {k: f"file:{d.resolve()}/{k}.pem" for k in SECURITY_FILES}
    assert tree == {
        "Authentication": [
            ("Library", {"path": "dds_security_auth", "initFunction": "init_authentication",
                         "finalizeFunction": "finalize_authentication"}, ""),
            ("IdentityCA", {}, uri["identity_ca"]),
            ("IdentityCertificate", {}, uri["certificate"]),
            ("PrivateKey", {}, uri["private_key"]),
        ],
        "AccessControl": [
            ("Library", {"path": "dds_security_ac", "initFunction": "init_access_control",
                         "finalizeFunction": "finalize_access_control"}, ""),
            ("PermissionsCA", {}, uri["permissions_ca"]),
            ("Governance", {}, uri["governance"]),
            ("Permissions", {}, uri["permissions"]),
        ],
        "Cryptographic": [
            ("Library", {"path": "dds_security_crypto", "initFunction": "init_crypto", "finalizeFunction": "finalize_crypto"}, ""),
        ],
    }


def test_dds_security_config_takes_all_six_files_or_none(tmp_path):
    from robot_rl.real.config import DeployConfigError
    from tests.test_real_config import deploy_cfg

    for k in SECURITY_FILES:
        (tmp_path / k).write_text("x")
    _, cfg = deploy_cfg()
    assert cfg.dds_security.files() is None
    _, cfg = deploy_cfg(*(f"deploy.dds_security.{k}={tmp_path / k}" for k in SECURITY_FILES))
    assert cfg.dds_security.files() == {k: str(tmp_path / k) for k in SECURITY_FILES}
    with pytest.raises(DeployConfigError, match=r"sets \['identity_ca'\] but not \['certificate', 'private_key'"):
        deploy_cfg(f"deploy.dds_security.identity_ca={tmp_path / 'identity_ca'}")
    with pytest.raises(DeployConfigError, match=r"deploy.dds_security.governance=.*nowhere.p7s' is not a file"):
        deploy_cfg(*(f"deploy.dds_security.{k}={tmp_path / k}" for k in SECURITY_FILES if k != "governance"),
                   "deploy.dds_security.governance=/nowhere.p7s")
    with pytest.raises(DeployConfigError, match="transport=dds, not rclpy; with rclpy use SROS2"):
        deploy_cfg("deploy=ros2", *(f"deploy.dds_security.{k}={tmp_path / k}" for k in SECURITY_FILES))


def test_dds_security_without_cyclone_security_names_the_fix(tmp_path):
    """The PyPI cyclonedds wheel has no DDS Security (its configuration parser rejects <Security>): a secured transport
    stops with the fix instead of running unsecured."""
    from robot_rl.real.cyclonedds_config import has_dds_security
    from robot_rl.real.transport_dds import DdsTransport

    if has_dds_security():
        pytest.skip("this Cyclone DDS has DDS Security (test_secured_node_admits_only_authenticated_participants runs)")
    with pytest.raises(RuntimeError, match=r"PyPI cyclonedds wheel is built without it.*-DENABLE_SECURITY=ON"):
        DdsTransport(random.randint(100, 199), loopback=True, security={k: str(tmp_path / k) for k in SECURITY_FILES})


GOVERNANCE = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-Security/20170801/omg_shared_ca_governance.xsd">
  <domain_access_rules><domain_rule>
    <domains><id>{domain}</id></domains>
    <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
    <enable_join_access_control>true</enable_join_access_control>
    <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
    <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
    <rtps_protection_kind>ENCRYPT</rtps_protection_kind>
    <topic_access_rules><topic_rule>
      <topic_expression>*</topic_expression>
      <enable_discovery_protection>true</enable_discovery_protection>
      <enable_liveliness_protection>true</enable_liveliness_protection>
      <enable_read_access_control>true</enable_read_access_control>
      <enable_write_access_control>true</enable_write_access_control>
      <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
      <data_protection_kind>ENCRYPT</data_protection_kind>
    </topic_rule></topic_access_rules>
  </domain_rule></domain_access_rules>
</dds>
"""
PERMISSIONS = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-Security/20170801/omg_shared_ca_permissions.xsd">
  <permissions><grant name="{name}">
    <subject_name>CN={name}</subject_name>
    <validity><not_before>2020-01-01T00:00:00</not_before><not_after>2100-01-01T00:00:00</not_after></validity>
    <allow_rule>
      <domains><id>{domain}</id></domains>
      <publish><topics><topic>*</topic></topics></publish>
      <subscribe><topics><topic>*</topic></topics></subscribe>
    </allow_rule>
    <default>DENY</default>
  </grant></permissions>
</dds>
"""


def make_identities(d, domain: int, names: list[str]) -> dict[str, dict[str, str]]:
    """A DDS Security PKI made with openssl, as `ros2 security create_enclave` lays it out: an identity CA and a
    permissions CA (EC P-256), the domain's signed governance, and per name a certificate, key and signed permissions."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    d.mkdir(parents=True)
    for ca in ("identity_ca", "permissions_ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-keyout", f"{ca}.key.pem", "-out", f"{ca}.cert.pem", "-subj", f"/CN={ca} {d.name}")
    (d / "governance.xml").write_text(GOVERNANCE.format(domain=domain))
    openssl("smime", "-sign", "-text", "-in", "governance.xml", "-out", "governance.p7s",
            "-signer", "permissions_ca.cert.pem", "-inkey", "permissions_ca.key.pem")
    out = {}
    for name in names:
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key.pem", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "identity_ca.cert.pem", "-CAkey", "identity_ca.key.pem",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.cert.pem")
        (d / f"{name}.permissions.xml").write_text(PERMISSIONS.format(name=name, domain=domain))
        openssl("smime", "-sign", "-text", "-in", f"{name}.permissions.xml", "-out", f"{name}.permissions.p7s",
                "-signer", "permissions_ca.cert.pem", "-inkey", "permissions_ca.key.pem")
        out[name] = {"identity_ca": str(d / "identity_ca.cert.pem"), "certificate": str(d / f"{name}.cert.pem"),
                     "private_key": str(d / f"{name}.key.pem"), "permissions_ca": str(d / "permissions_ca.cert.pem"),
                     "governance": str(d / "governance.p7s"), "permissions": str(d / f"{name}.permissions.p7s")}
    return out


# A participant in its own process (one Cyclone configuration per domain and process): sends its name on
# /sec/reset, counts what it hears on /sec/status, prints that count as JSON.
PEER = """
import json, sys, time
from robot_rl.real import messages as M
from robot_rl.real.qos import RELIABLE
from robot_rl.real.transport_dds import DdsTransport
name, domain, security, duration = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
t = DdsTransport(domain, loopback=True, security=security)
pub, sub = t.publisher("/sec/reset", M.String, RELIABLE), t.subscribe("/sec/status", M.String, RELIABLE)
heard, end = 0, time.monotonic() + duration
while time.monotonic() < end:
    pub.publish(M.String(data=name))
    t.wait(0.05)
    heard += len(sub.take())
print(json.dumps({"name": name, "heard": heard}))
"""


def test_secured_node_admits_only_authenticated_participants(tmp_path):
    """With a Cyclone DDS that has DDS Security (not the PyPI wheel: docs/security.md builds one), a node configured
    through deploy.dds_security exchanges data with a participant holding a certificate and permissions of its
    CAs, and with neither an unauthenticated participant nor one whose certificate another CA signed."""
    from robot_rl.real.cyclonedds_config import has_dds_security
    from robot_rl.real.transport_dds import DdsTransport

    if not has_dds_security():
        pytest.skip("the Cyclone DDS that Python loads has no DDS Security (the PyPI wheel); docs/security.md builds one")
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make certificates")
    domain = random.randint(100, 199)
    ours = make_identities(tmp_path / "cell", domain, ["node", "operator"])
    theirs = make_identities(tmp_path / "rogue", domain, ["intruder"])
    node = DdsTransport(domain, loopback=True, security=ours["node"])
    sub, status = node.subscribe("/sec/reset", M.String, RELIABLE), node.publisher("/sec/status", M.String, RELIABLE)
    duration = 8.0
    peers = [subprocess.Popen([sys.executable, "-c", PEER, name, str(domain), json.dumps(sec), str(duration)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for name, sec in (("operator", ours["operator"]), ("anonymous", None), ("intruder", theirs["intruder"]))]
    senders, end = set(), time.monotonic() + duration
    while time.monotonic() < end:
        status.publish(M.String(data="status"))
        node.wait(0.05)
        senders |= {m.data for m, _ in sub.take()}
    heard = {}
    for p in peers:
        out, _ = p.communicate(timeout=30)
        result = json.loads(out.strip().splitlines()[-1])
        heard[result["name"]] = result["heard"]
    node.close()
    assert senders == {"operator"}
    assert heard["operator"] > 0 and heard["anonymous"] == 0 and heard["intruder"] == 0, heard
