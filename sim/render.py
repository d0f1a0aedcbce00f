"""Offscreen rendering of env cameras to uint8 RGB frames: image observations and videos.

Headless Linux machines render through EGL (or OSMesa): `sim` sets MUJOCO_GL=egl when no display is
present and the user has not chosen, before MuJoCo is imported. MuJoCo reads MUJOCO_GL once, at import, and
an unusable value (a typo, osmesa without libOSMesa) makes `import mujoco` itself fail; `choose_gl_backend`
notices that first, imports MuJoCo with rendering disabled so physics still works, and rendering then
raises one error that names the packages and the setting.

One GL context (a mujoco.Renderer) serves every model of one structure at one size: the scene is built
from each env's own MjModel (`mjv_updateScene`), so randomized sizes, colours, lights and camera poses are
drawn as the env simulates them, without a context per env.

Cost on CPU GL (Mesa llvmpipe; bench/render_throughput.py): at 96x96, shadows multiply a frame's render
time by about five, the table's reflection and 4x anti-aliasing by about two each. Image observations are
drawn at quality "fast" (none of the three) unless EnvConfig.image_quality is "high"; videos are "high".
"""

from __future__ import annotations

import atexit
import ctypes.util
import os
import sys
import weakref

import numpy as np

from robot_rl.sim.config import ConfigError

GL_FIX = (
    "install EGL (apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) and set MUJOCO_GL=egl, "
    "or install OSMesa (apt-get install libosmesa6) and set MUJOCO_GL=osmesa"
)
# MUJOCO_GL values MuJoCo accepts on Linux, and the library each offscreen backend loads.
_VALID_GL = ("egl", "osmesa", "glfw", "glx", "", "enable", "enabled", "on", "true", "1",
             "disable", "disabled", "off", "false", "0")
_GL_LIBRARY = {"egl": "EGL", "osmesa": "OSMesa"}
QUALITIES = ("fast", "high")  # fast: no shadows, reflections or anti-aliasing; high: the model's own settings
_gl_problem: str | None = None  # why this process cannot render, found before MuJoCo was imported


class RenderingUnavailable(ConfigError, RuntimeError):
    """No usable OpenGL for offscreen rendering; the message names the packages and MUJOCO_GL."""


def choose_gl_backend() -> None:
    """Pick MUJOCO_GL before `import mujoco`: egl (else osmesa) on a display-less Linux unless the user chose.

    A value that cannot work is not passed on to MuJoCo (whose import would fail): MuJoCo is imported with
    rendering disabled, the variable is restored for child processes, and rendering raises later."""
    import logging

    global _gl_problem
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL's INFO notes at import are noise
    if not sys.platform.startswith("linux") or "mujoco" in sys.modules:
        return
    requested = os.environ.get("MUJOCO_GL")
    if requested is None:
        if os.environ.get("DISPLAY"):
            return
        for gl, lib in _GL_LIBRARY.items():
            if ctypes.util.find_library(lib):
                os.environ["MUJOCO_GL"] = gl
                return
        problem = "no display and neither libEGL nor libOSMesa is installed"
    else:
        v = requested.lower().strip()
        if v not in _VALID_GL:
            problem = f"MUJOCO_GL={requested!r} is not a value MuJoCo knows (egl, osmesa, glfw, glx)"
        elif v in _GL_LIBRARY and not ctypes.util.find_library(_GL_LIBRARY[v]):
            problem = f"MUJOCO_GL={v} but lib{_GL_LIBRARY[v]} is not installed"
        else:
            return
    _gl_problem = problem
    os.environ["MUJOCO_GL"] = "disable"
    try:
        import mujoco  # noqa: F401  (reads MUJOCO_GL now, once)
    finally:
        if requested is None:
            del os.environ["MUJOCO_GL"]
        else:
            os.environ["MUJOCO_GL"] = requested


def camera_names(model) -> list[str]:
    import mujoco

    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]


def check_cameras(model, cameras) -> None:
    """ConfigError naming the model's cameras unless every name in `cameras` is one of them."""
    have = camera_names(model)
    unknown = [c for c in cameras if c not in have]
    if unknown:
        raise ConfigError(f"unknown camera(s) {unknown} in cameras={list(cameras)}; the model has cameras: "
                          f"{', '.join(have)}")


def set_pose(model, data, qpos, mocap_pos) -> None:
    """Put `data` at (qpos, mocap_pos) with what drawing needs: body, geom, camera and light poses."""
    import mujoco

    data.qpos[:] = qpos
    if model.nmocap:
        data.mocap_pos[:] = mocap_pos
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    mujoco.mj_camlight(model, data)


class FrameRenderer:
    """RGB frames [H, W, 3] uint8 of named cameras; one GL context per model structure at this size."""

    def __init__(self, width: int = 320, height: int = 240, quality: str = "high"):
        if width < 1 or height < 1:
            raise ValueError(f"render size {width}x{height} must be positive")
        if quality not in QUALITIES:
            raise ValueError(f"render quality {quality!r}; valid: {', '.join(QUALITIES)}")
        self.width, self.height = int(width), int(height)
        self.quality = quality
        self._renderers: dict[tuple, object] = {}
        self._option = None
        _live.add(self)

    def context(self, model):
        """The mujoco.Renderer for models shaped like `model`, created on first use (GL errors surface here)."""
        import mujoco

        sig = _signature(model)
        r = self._renderers.get(sig)
        if r is None:
            if _gl_problem is not None:
                raise RenderingUnavailable(f"offscreen rendering is unavailable ({_gl_problem}); {GL_FIX}")
            # The context's offscreen buffer is read from the model when it is made: exactly the image size
            # (a larger buffer costs on every frame), then the model is left as it was.
            g, q = model.vis.global_, model.vis.quality
            saved = (g.offwidth, g.offheight, q.offsamples)
            g.offwidth, g.offheight = self.width, self.height
            if self.quality == "fast":
                q.offsamples = 0  # no multisample anti-aliasing
            try:
                r = mujoco.Renderer(model, self.height, self.width)
            except Exception as e:  # no GL: name the fix instead of a GL stack trace
                raise RenderingUnavailable(
                    f"offscreen rendering is unavailable with MUJOCO_GL={os.environ.get('MUJOCO_GL', '<unset>')} "
                    f"({str(e).strip().splitlines()[0]}){_import_order_hint()}; {GL_FIX}"
                ) from None
            finally:
                g.offwidth, g.offheight, q.offsamples = saved
            high = self.quality == "high"
            r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = high
            r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = high
            self._renderers[sig] = r
            self._option = mujoco.MjvOption()
            self._option.sitegroup[:] = 0  # sites are markers for code (grip_site is a red dot), not scenery
        return r

    def render(self, model, data, camera: str, out: np.ndarray | None = None) -> np.ndarray:
        """RGB frame [H, W, 3] uint8 of `camera` (a camera name in the model) for `data`'s current poses."""
        import mujoco

        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(f"unknown camera {camera!r}; cameras in the model: {camera_names(model)}")
        r = self.context(model)
        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        cam.fixedcamid = cam_id
        # The scene from this model (not the one the context was made with): per-env randomized fields.
        mujoco.mjv_updateScene(model, data, self._option, None, cam, mujoco.mjtCatBit.mjCAT_ALL.value, r.scene)
        return r.render(out=out)

    def render_images(self, cameras, models, data, qpos, mocap_pos, env_ids) -> dict[str, np.ndarray]:
        """{"images/<camera>": uint8 [len(env_ids), H, W, 3]} of envs `env_ids` at poses qpos[i], mocap_pos[i].

        models[i] is env i's MjModel; `data` is one scratch MjData of the same structure."""
        out = {c: np.empty((len(env_ids), self.height, self.width, 3), np.uint8) for c in cameras}
        for j, i in enumerate(env_ids):
            m = models[i]
            set_pose(m, data, qpos[i], mocap_pos[i])
            for c in cameras:
                self.render(m, data, c, out=out[c][j])
        return {f"images/{c}": v for c, v in out.items()}

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()


def _import_order_hint() -> str:
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY") and "MUJOCO_GL" not in os.environ:
        return (" - mujoco was imported before sim, so sim could not choose MUJOCO_GL=egl for this display-less "
                "machine: import sim first or set MUJOCO_GL")
    return ""


_live: "weakref.WeakSet[FrameRenderer]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # GL contexts freed by garbage collection during interpreter shutdown print errors (their modules are
    # already gone); close whatever is still open while everything is importable.
    for r in list(_live):
        r.close()


def _signature(model) -> tuple:
    """Models with the same signature share the GL resources of one context (textures, meshes, buffers)."""
    return (model.nbody, model.ngeom, model.ncam, model.nlight, model.nmat, model.ntex, model.nmesh, model.nskin,
            model.nhfield)
