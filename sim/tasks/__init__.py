"""Task registry: name -> Task class."""

from sim.tasks.lift import LiftTask

TASKS = {t.name: t for t in (LiftTask,)}
