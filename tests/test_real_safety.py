"""Every rule of the safety layer (real/safety.py), and the property that no command ever leaves the limits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robot_rl.real import episode_events
from robot_rl.real.messages import String
from robot_rl.real.observation import ObservationModel
from robot_rl.real.safety import Mode, SafetyFilter
from robot_rl.sim import robot
from tests.test_real_config import deploy_cfg, lift_env

HOME = np.append(robot.HOME_QPOS, [0.04, 0.04])
DT = 0.01  # s: one tick of the default 100 Hz


@pytest.fixture(scope="module")
def model():
    env = lift_env()
    _, cfg = deploy_cfg()
    yield cfg, ObservationModel(env, cfg.joints)
    env.close()


@pytest.fixture()
def cfg(model):
    return model[0]


@pytest.fixture()
def safety(model):
    cfg, om = model
    return SafetyFilter(cfg, om.ee_pos)


def _state(cfg, q=HOME):
    return list(cfg.joints), list(q), [0.0] * len(q)


# ---- inputs -------------------------------------------------------------------------------------------
def test_joint_state_in_another_order_is_reordered(safety, cfg):
    names, q, qd = _state(cfg)
    perm = np.random.default_rng(0).permutation(len(names))
    out = safety.check_joint_state([names[i] for i in perm], [q[i] for i in perm], [float(i) for i in perm])
    assert out is not None
    np.testing.assert_allclose(out[0], q)
    np.testing.assert_allclose(out[1], np.arange(len(names)))


@pytest.mark.parametrize("names, counter", [
    (lambda n: n[:-1], "rejected_joint_state_names"),  # a joint missing
    (lambda n: n[:-1] + ["wrist_extra"], "rejected_joint_state_names"),  # an unknown joint
    (lambda n: n[:-1] + [n[0]], "rejected_joint_state_names"),  # a joint twice
])
def test_joint_state_with_wrong_names_is_rejected_and_counted(safety, cfg, names, counter):
    n, q, qd = _state(cfg)
    bad = names(n)
    assert safety.check_joint_state(bad, q[: len(bad)], qd[: len(bad)]) is None
    assert safety.counts[counter] == 1 and safety.last_rejection


def test_joint_state_with_wrong_value_count_is_rejected_and_counted(safety, cfg):
    n, q, qd = _state(cfg)
    assert safety.check_joint_state(n, q[:-1], qd) is None
    assert safety.check_joint_state(n, q, qd[:3]) is None
    assert safety.counts["rejected_joint_state_count"] == 2
    assert safety.check_joint_state(n, q, []) is not None  # no velocities at all is allowed


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_joint_state_with_nan_or_inf_is_rejected_and_counted(safety, cfg, bad):
    n, q, qd = _state(cfg)
    q2 = list(q)
    q2[3] = bad
    assert safety.check_joint_state(n, q2, qd) is None
    qd2 = list(qd)
    qd2[0] = bad
    assert safety.check_joint_state(n, q, qd2) is None
    assert safety.counts["rejected_joint_state_nonfinite"] == 2


def test_teleop_and_pose_vectors_of_wrong_length_or_nonfinite_are_rejected(safety):
    assert safety.check_vector("teleop", [0.1, 0.2, 0.3], 4) is None
    assert safety.check_vector("teleop", [0.1, np.nan, 0.3, 1.0], 4) is None
    assert safety.check_vector("object_pose", [0, 0, 0, 0, 0, 0, np.inf], 7) is None
    assert safety.counts["rejected_teleop_length"] == 1 and safety.counts["rejected_teleop_nonfinite"] == 1
    assert safety.counts["rejected_object_pose_nonfinite"] == 1
    np.testing.assert_allclose(safety.check_vector("teleop", [0.1, 0.2, 0.3, 1.0], 4), [0.1, 0.2, 0.3, 1.0])


START = '{"event": "start", "index": 0, "seed": 1, "target": [0.45, 0.0, 0.12]}'


@pytest.mark.parametrize("payload, kind", [
    ('{"event": "start", "index": 0, "seed": "x", "target": [0.45, 0.0, 0.12]}', "seed"),
    ('{"event": "start", "index": 0, "seed": 1.5}', "seed"),
    ('{"event": "start", "index": 0, "target": [0.45]}', "target"),  # one value: IndexError in the task's observe
    ('{"event": "start", "index": 0, "target": [NaN, 0.0, 0.12]}', "json"),  # NaN is not a JSON number
    ('{"event": "start", "index": 0, "target": [1e999, 0.0, 0.12]}', "target"),  # parses to inf
    ('{"event": "start", "index": 0, "target": [true, 0.0, 0.12]}', "target"),
    ('{"event": "start", "index": 0, "target": [0.45, 0.0, 0.12], "colour": "red"}', "keys"),
    ('{"event": "start", "index": true}', "index"),
    ('{"event": "start", "index": -1}', "index"),
    ('{"event": "end", "index": 0, "success": "yes"}', "success"),
    ('{"event": "end", "index": 0, "steps": -3}', "steps"),
    ('{"event": "stop", "index": 0}', "event"),
    ('["start", 0]', "event"),
    ("not json", "json"),
    ("[" * 50_000, "json"),  # nesting deeper than the parser's recursion limit
    ("x" * 70_000, "size"),
])
def test_malformed_episode_events_are_refused_naming_the_kind(payload, kind):
    with pytest.raises(episode_events.EpisodeEventError) as e:
        episode_events.parse(String(data=payload), target_dim=3)
    assert e.value.kind == kind and str(e.value)
    assert episode_events.parse(String(data=START), target_dim=3)["seed"] == 1


# ---- commands -----------------------------------------------------------------------------------------
def test_a_command_soon_after_the_last_one_moves_only_as_far_as_the_time_between_allows(safety, cfg):
    # a late chunk publishes between two ticks: over the tick, the command still moves one tick's worth
    v = cfg.limits["joint7"].velocity
    safety.start(HOME, 0.0)
    target = HOME.copy()
    target[6] += 0.5  # joint7 turns the gripper about its own axis: the workspace rule stays out of it
    c1 = safety.filter(target, HOME, DT)  # a tick
    c2 = safety.filter(target, HOME, DT + 0.002)  # a late chunk, 2 ms later
    c3 = safety.filter(target, HOME, 2 * DT)  # the next tick
    assert c1[6] - HOME[6] == pytest.approx(v * DT)
    assert c2[6] - c1[6] == pytest.approx(v * 0.002)
    assert c3[6] - c1[6] == pytest.approx(v * DT)
    c4 = safety.filter(target, HOME, 2 * DT)  # sent at the same instant: no move at all
    np.testing.assert_array_equal(c4, c3)
    c5 = safety.filter(target, HOME, 5 * DT)  # a tick 20 ms late makes up for half a tick at most
    assert c5[6] - c3[6] == pytest.approx(v * 1.5 * DT)


def test_acceleration_limits_speeding_up_and_never_slowing_down(model, cfg):
    cfg_a = dataclasses.replace(cfg, limits={**cfg.limits, "joint7": dataclasses.replace(cfg.limits["joint7"],
                                                                                         acceleration=20.0)})
    s = SafetyFilter(cfg_a, model[1].ee_pos)
    v, a = cfg.limits["joint7"].velocity, 20.0
    q = s.start(HOME, 0.0)
    target = HOME.copy()
    target[6] += 1.0
    speeds = []
    for k in range(25):
        prev = q
        q = s.filter(target, q, (k + 1) * DT)  # a robot that follows perfectly
        speeds.append((q[6] - prev[6]) / DT)
    assert speeds[0] == pytest.approx(a * DT)  # from rest: one tick of acceleration
    assert np.all(np.diff(speeds) <= a * DT + 1e-9) and speeds[-1] == pytest.approx(v)  # then up to full speed
    assert s.counts["clipped_acceleration"] > 0
    stop = s.filter(q, q, 26 * DT)  # the target is where the command is: it stops at once
    np.testing.assert_array_equal(stop, q)
    back = HOME.copy()  # reversing: from rest again, one tick of acceleration
    assert (s.filter(back, q, 27 * DT)[6] - q[6]) / DT == pytest.approx(-a * DT)


def test_commands_are_clipped_to_joint_position_limits(safety):
    safety.start(HOME, 0.0)
    far = HOME.copy()
    far[6] = 10.0  # joint7 turns the gripper about its own axis: the workspace rule stays out of it
    far[7] = -1.0  # a finger below its closed position
    for k in range(400):
        c = safety.filter(far, safety.last, (k + 1) * DT)  # a robot that follows perfectly
    assert c[6] == pytest.approx(safety.upper[6]) and c[7] == pytest.approx(safety.lower[7])
    assert safety.counts["clipped_position"] > 0
    assert np.all(c <= safety.upper) and np.all(c >= safety.lower)


def test_command_changes_are_limited_to_velocity_per_tick(safety, cfg):
    safety.start(HOME, 0.0)
    target = HOME.copy()
    target[0] += 0.1
    c = safety.filter(target, HOME, DT)
    assert c[0] - HOME[0] == pytest.approx(cfg.limits["joint1"].velocity / cfg.rate_hz)
    assert safety.counts["clipped_velocity"] == 1


def test_commands_stay_within_max_step_of_the_measured_position(safety, cfg):
    safety.start(HOME, 0.0)
    measured = HOME.copy()
    target = HOME.copy()
    target[0] += 1.0
    for k in range(50):  # the robot does not move (blocked): the command stops max_step away
        c = safety.filter(target, measured, (k + 1) * DT)
    assert c[0] - measured[0] == pytest.approx(cfg.limits["joint1"].max_step)
    assert safety.counts["clipped_step"] > 0


def test_lagging_robot_pulls_the_command_toward_it_at_most_at_velocity(safety, cfg):
    safety.start(HOME, 0.0)
    measured = HOME.copy()
    measured[1] -= 1.0  # far from the last command: both limits cannot hold
    c = safety.filter(HOME, measured, DT)
    step = cfg.limits["joint2"].velocity / cfg.rate_hz
    assert c[1] == pytest.approx(HOME[1] - step)  # moves toward the robot, no faster than allowed


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_command_holds_the_last_command(safety, bad):
    safety.start(HOME, 0.0)
    cand = HOME.copy()
    cand[2] = bad
    np.testing.assert_array_equal(safety.filter(cand, HOME, DT), HOME)
    assert safety.counts["nonfinite_commands"] == 1


def test_commands_never_take_the_end_effector_out_of_the_workspace(model, safety):
    cfg, om = model
    safety.start(HOME, 0.0)
    # drive joint2 forward: the gripper sweeps down toward the table (z < workspace_low[2])
    target = HOME.copy()
    target[1] += 1.5
    q = HOME.copy()
    for k in range(200):
        q = safety.filter(target, q, (k + 1) * DT)
        assert om.ee_pos(q)[2] >= cfg.workspace_low[2] - 1e-9
    assert safety.counts["clipped_workspace"] > 0
    assert om.ee_pos(q)[2] == pytest.approx(cfg.workspace_low[2], abs=5e-3)  # it got to the boundary


def test_outside_the_workspace_commands_never_move_farther_out(model):
    cfg, om = model
    import dataclasses

    tight = dataclasses.replace(cfg, workspace_low=(0.2, -0.4, 0.3))  # home (z 0.25) is below: outside
    s = SafetyFilter(tight, om.ee_pos)
    s.start(HOME, 0.0)
    z0 = om.ee_pos(HOME)[2]
    down = HOME.copy()
    down[1] += 0.5
    q = s.filter(down, HOME, DT)
    assert om.ee_pos(q)[2] >= z0 - 1e-9


# ---- watchdog and latches -----------------------------------------------------------------------------
def test_stale_joint_states_hold_position_then_stop(safety, cfg):
    w = cfg.watchdog
    assert safety.watchdog(10.0, None) == Mode.WAITING
    assert safety.watchdog(10.0, 10.0 - w.hold_after_s / 2) == Mode.RUNNING
    assert safety.watchdog(10.0, 10.0 - (w.hold_after_s + w.stop_after_s) / 2) == Mode.HOLDING
    assert safety.watchdog(10.0, 10.0 - w.stop_after_s * 1.01) == Mode.STOPPED
    assert "stale" in safety.stop_reason
    # latched: fresh states alone do not resume
    assert safety.watchdog(11.0, 11.0) == Mode.STOPPED
    assert safety.request_reset(11.0, 11.0) is None
    assert safety.watchdog(11.0, 11.0) == Mode.RUNNING


def test_estop_latches_and_clears_only_by_reset_after_release(safety):
    safety.on_estop(True, 1.0)
    assert safety.watchdog(1.0, 1.0) == Mode.STOPPED and safety.stop_reason == "e-stop"
    assert "e-stop still asserted" in safety.request_reset(1.0, 1.0)
    safety.on_estop(False, 1.0)  # releasing the button alone clears nothing
    assert safety.watchdog(1.0, 1.0) == Mode.STOPPED
    assert safety.request_reset(1.0, 1.0) is None
    assert safety.watchdog(1.0, 1.0) == Mode.RUNNING
    assert safety.counts["stops"] == 1 and safety.counts["resets"] == 1


def test_every_estop_press_latches_even_when_a_release_follows_at_once(safety):
    safety.on_estop(True, 1.0)
    safety.on_estop(False, 1.0)  # both read in one drain: the press still counts
    assert safety.stopped and safety.stop_reason == "e-stop" and safety.counts["estop_presses"] == 1


def test_lost_estop_heartbeat_latches_a_stop_and_refuses_resets(model, cfg):
    s = SafetyFilter(dataclasses.replace(cfg, estop_heartbeat_s=0.2), model[1].ee_pos)
    s.arm(0.0)
    s.on_estop(False, 0.1)  # the button bridge's heartbeat
    assert s.watchdog(0.25, 0.25) == Mode.RUNNING
    assert s.watchdog(0.35, 0.35) == Mode.STOPPED and "heartbeat" in s.stop_reason  # 0.25 s without one
    assert "no e-stop message" in s.request_reset(0.35, 0.35)
    s.on_estop(False, 0.4)
    assert s.request_reset(0.4, 0.4) is None and s.watchdog(0.4, 0.4) == Mode.RUNNING
    silent = SafetyFilter(dataclasses.replace(cfg, estop_heartbeat_s=0.2), model[1].ee_pos)
    silent.arm(0.0)  # no e-stop publisher at all
    assert silent.watchdog(0.3, 0.3) == Mode.STOPPED and "heartbeat" in silent.stop_reason


def test_the_first_command_waits_to_hear_the_estop_topic(safety, cfg):
    safety.arm(0.0)
    assert safety.watchdog(0.1, 0.1) == Mode.WAITING  # a pressed e-stop's last value may still be on its way
    assert safety.watchdog(cfg.estop_listen_s + 0.01, 0.5) == Mode.RUNNING  # nobody publishes: go
    heard = SafetyFilter(cfg, safety.ee_pos)
    heard.arm(0.0)
    heard.on_estop(False, 0.05)
    assert heard.watchdog(0.1, 0.1) == Mode.RUNNING  # the e-stop publisher spoke: released


def test_reset_is_refused_while_joint_states_are_stale(safety, cfg):
    safety.latch("policy raised: boom")
    assert "stale" in safety.request_reset(5.0, 5.0 - 2 * cfg.watchdog.hold_after_s)
    assert safety.request_reset(5.0, None) is not None
    assert safety.stopped and safety.stop_reason == "policy raised: boom"


def test_a_reset_restarts_commands_from_the_measured_position(safety):
    safety.start(HOME, 0.0)
    safety.latch("e-stop")
    assert safety.request_reset(1.0, 1.0) is None
    moved = HOME + np.r_[[0.05] * 7, -0.01, -0.01]
    np.testing.assert_allclose(safety.filter(moved, moved, 1.0), moved)  # no rate limit against the pre-stop command


# ---- property: random policy outputs never produce a command outside the limits ----------------------
finite_or_not = st.one_of(
    st.floats(min_value=-10, max_value=10, allow_nan=False),
    st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    candidates=st.lists(st.lists(finite_or_not, min_size=9, max_size=9), min_size=1, max_size=12),
    offsets=st.lists(st.lists(st.floats(min_value=-0.3, max_value=0.3), min_size=9, max_size=9), min_size=12, max_size=12),
    tracking=st.booleans(),
)
def test_no_command_ever_leaves_the_limits_for_random_policy_outputs(model, candidates, offsets, tracking):
    cfg, om = model
    s = SafetyFilter(cfg, om.ee_pos)
    prev = s.start(HOME, 0.0)
    lo, hi = s.lower, s.upper
    for k, (cand, off) in enumerate(zip(candidates, offsets)):
        # the robot either tracks the last command exactly or sits somewhere near it (within its limits)
        measured = prev.copy() if tracking else np.clip(prev + np.asarray(off), lo, hi)
        c = s.filter(np.asarray(cand, dtype=np.float64), measured, (k + 1) * DT)
        assert np.all(np.isfinite(c))
        assert np.all(c >= lo - 1e-12) and np.all(c <= hi + 1e-12)
        assert np.all(np.abs(c - prev) <= s.velocity * DT + 1e-12)
        p = om.ee_pos(c)
        assert np.all(p >= np.asarray(cfg.workspace_low) - 1e-9) and np.all(p <= np.asarray(cfg.workspace_high) + 1e-9)
        if tracking:
            assert np.all(np.abs(c - measured) <= s.max_step + 1e-12)
        prev = c
