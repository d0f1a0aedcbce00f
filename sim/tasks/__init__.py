"""Task registry: name -> Task class."""

from sim.tasks.lift import LiftTask
from sim.tasks.peg_insert import PegInsertTask

TASKS = {t.name: t for t in (LiftTask, PegInsertTask,)}
