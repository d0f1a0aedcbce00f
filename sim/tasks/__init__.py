"""Task registry: name -> Task class."""

from sim.tasks.color_lift import ColorLiftTask
from sim.tasks.lift import LiftTask
from sim.tasks.peg_insert import PegInsertTask
from sim.tasks.push import PushTask

TASKS = {t.name: t for t in (ColorLiftTask, LiftTask, PegInsertTask, PushTask)}
