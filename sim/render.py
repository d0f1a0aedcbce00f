"""Offscreen rendering of env cameras to uint8 RGB frames (videos now, image observations later).

Headless Linux machines render through EGL (or OSMesa): `sim` sets MUJOCO_GL=egl when no display is
present and the user has not chosen, before MuJoCo is imported. One mujoco.Renderer (GL context) is kept
per model, so an env whose model was randomized (object size) is drawn as it is simulated.
"""

from __future__ import annotations

import os
import sys


def choose_gl_backend() -> None:
    """MUJOCO_GL=egl on a display-less Linux unless already set (must run before `import mujoco`)."""
    import logging

    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL's INFO notes at import are noise
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY") and "mujoco" not in sys.modules:
        os.environ.setdefault("MUJOCO_GL", "egl")


class FrameRenderer:
    def __init__(self, width: int = 320, height: int = 240):
        if width < 1 or height < 1:
            raise ValueError(f"render size {width}x{height} must be positive")
        self.width, self.height = int(width), int(height)
        self._renderers: dict[int, object] = {}

    def render(self, model, data, camera: str):
        """RGB frame [H, W, 3] uint8 of `camera` (a camera name in the model)."""
        import mujoco

        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
            raise ValueError(f"unknown camera {camera!r}; cameras in the model: {names}")
        r = self._renderers.get(id(model))
        if r is None:
            try:
                r = mujoco.Renderer(model, self.height, self.width)
            except Exception as e:  # no GL: name the fix instead of a GL stack trace
                raise RuntimeError(
                    f"offscreen rendering is unavailable ({e}); on a headless machine install EGL "
                    "(apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) and set MUJOCO_GL=egl, "
                    "or use MUJOCO_GL=osmesa with libosmesa6"
                ) from None
            self._renderers[id(model)] = r
        r.update_scene(data, camera=camera)
        return r.render()

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()
