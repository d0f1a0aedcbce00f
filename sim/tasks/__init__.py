"""Task registry: name -> Task class."""

from sim.tasks.lift import LiftTask
from sim.tasks.peg_insert import PegInsertTask
from sim.tasks.push import PushTask

TASKS = {t.name: t for t in (LiftTask, PegInsertTask, PushTask)}
