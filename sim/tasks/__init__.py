"""Task registry: name -> Task class, the built-in tasks and those of installed packages (entry-point group
"robot_rl.tasks"; sim/registry.py, docs/own_task.md)."""

from robot_rl.sim.registry import Registry
from robot_rl.sim.task import Task


def _builtins() -> dict:
    from robot_rl.sim.tasks.color_lift import ColorLiftTask
    from robot_rl.sim.tasks.lift import LiftTask
    from robot_rl.sim.tasks.peg_insert import PegInsertTask
    from robot_rl.sim.tasks.push import PushTask

    return {t.name: t for t in (ColorLiftTask, LiftTask, PegInsertTask, PushTask)}


def _check(obj) -> str | None:
    return None if isinstance(obj, type) and issubclass(obj, Task) else f"{obj!r} is not a subclass of robot_rl.sim.task.Task"


TASKS = Registry("task", "robot_rl.tasks", _builtins, _check, named=True)
register_task = TASKS.register
