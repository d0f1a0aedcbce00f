"""Scripted expert for peg_insert."""

from __future__ import annotations

import numpy as np

from robot_rl.sim.experts import Expert


def _deadband(x, band):
    """x moved toward 0 by `band` (0 inside it): small errors of a noisy estimate command no motion."""
    return np.sign(x) * np.maximum(np.abs(x) - band, 0.0)


def _wrap(a, period):
    return (a + 0.5 * period) % period - 0.5 * period


class PegInsertExpert(Expert):
    """Turn to the peg's square yaw, descend, grasp it just above its centre once a settled estimate says the
    hand is centred on it (closing the fingers gradually), lift it gently off the table and clear of the walls,
    turn it square to the hole, carry it over the hole, centre the peg's own bottom point (from its position
    and tilt) on the opening, lower it slowly, push in.

    The fit has 1.5 mm per side and every reading can be off by millimetres (randomization=sim2real: 5), so
    the centring reads an estimate that averages three readings of the peg's offset from the hole (its own,
    the peg's position against the hole's, the hand's position plus the grasp offset) over the ticks it
    hovers, and corrects a small fraction of it per tick; the descent starts once that estimate has stayed
    centred, and holds the hand's xy (in the opening: steers it by the peg's tilt). A descent that meets the
    rim (the peg tips in the pads) backs off and re-aims. How much single readings are trusted follows their
    measured jitter: on exact observations it corrects on each reading, as the expert without estimates did."""

    gain = 0.35  # fraction of a position error corrected per tick while picking and carrying
    trusted_gain = 0.5  # fraction of the centring error corrected per tick on trusted readings
    trusted_tol = 0.0015  # m (per axis) centring tolerance on trusted readings
    trusted_noise = 0.0005  # m, observation noise (std) at which single readings get half the trust
    hover = 0.05  # m above the grasp point while lining up to pick
    carry = 0.03  # m the peg's bottom clears the walls' top while carrying
    lift_gently = 0.015  # m, height of the peg's bottom below which it is lifted slowly
    lift_speed = 0.005  # m per step for that first lift
    above = 0.008  # m the peg's bottom hovers above the walls' top while centring
    z_band = 0.002  # m of hover height error left uncorrected (a jittering hand shakes the peg in its grasp)
    descend = 0.0025  # m per step while lowering the peg onto the opening
    push = 0.003  # m per step once the peg's bottom is inside the opening
    tilt_gain = 0.2  # fraction of the hand's offset over the held peg's bottom (read from its tilt) corrected per tick
    fine_gain = 0.2  # fraction of the estimated centring error corrected per tick over the hole
    # m, centring tolerance of the estimate before inserting, along x and y: the pads close along y and hold
    # the peg stiffly that way; about y it pivots in them, so an offset along x tips it on the rim
    xy_tol = (0.0006, 0.0012)
    centred_ticks = 4  # ticks the estimate must stay centred before the descent starts
    rim_tilt = 0.02  # change of the peg's tilt during the descent that says it sits on the rim
    ease = 0.001  # m per step up while a peg jammed in the opening is straightened
    rim_step = 0.0015  # m the aim moves (toward the tilt change) after a descent met the rim
    yaw_tol = 0.03  # rad, peg yaw tolerance before inserting
    yaw_rate = 0.02  # rad per step while turning the held peg (faster twists it in the grasp, tilting it)
    grasp_tol = 0.0025  # m (xy, smoothed) within which the fingers close on the peg
    close_rate = 0.007  # m per tick each finger's target closes (a faster finger can pass through the peg)
    close_ticks = 6  # ticks the fingers close on the peg before it is lifted

    def clean_action(self, obs):
        o_pos, o_yaw4, o_axis, o_hole, o_minus_hole, o_minus_ee = (self.obs(obs, "object", f) for f in (
            "pos", "yaw4", "axis", "hole", "minus_hole", "minus_ee"))
        tcfg = self.tcfg
        hh, hw = tcfg.peg_half_height, tcfg.peg_half_width
        ee, eyaw = self.ee_pos(obs), self.ee_yaw(obs)
        width = self.smooth("width", self.gripper_width(obs), 0.4)
        yaw4 = np.arctan2(o_yaw4[:, 1], o_yaw4[:, 0]) / 4.0  # peg yaw modulo pi/2, in [-pi/4, pi/4]
        zax = self.smooth("zax", o_axis, 0.3)
        zax = zax / np.maximum(np.linalg.norm(zax, axis=1, keepdims=True), 1e-6)
        hole = self.smooth("hole", o_hole, 0.0)  # fixed for the episode: the mean of every reading
        # How far to trust single readings: the fixture's readings jitter by the observation noise, and so do the
        # peg's while the hand is far from it (a robot may know its fixture exactly and still see the peg through
        # a noisy camera: the larger jitter counts). On exact observations (trust 1) the expert corrects on each
        # reading, as fast as its own action noise needs.
        untouched = np.linalg.norm(o_minus_ee, axis=1) > 0.04  # the peg's reading 4 cm or more from the hand
        noise = np.maximum(self.reading_noise("hole", o_hole), self.reading_noise("peg", o_pos, untouched))
        trust = 1.0 / (1.0 + (noise / self.trusted_noise) ** 2)
        self.cancel_noise = 1.0 - trust  # trusted readings correct its own action noise already

        # ---- held? (fingers closed on a peg-sized gap, the peg next to the hand) -------------------
        peg_ee = self.smooth("peg_ee", o_minus_ee, 0.3)
        near_hand = (np.linalg.norm(peg_ee[:, :2], axis=1) < hw + 0.01) & (np.abs(peg_ee[:, 2]) < hh + 0.01)
        on_peg = (width < 2 * hw + 0.006) & (width > 0.003)  # the pads can sink well into the peg
        held = near_hand & on_peg
        was = self.last_ticks("holding") > 0
        holding = held | (was & near_hand & (width < 2 * hw + 0.012))  # noise must not drop a held peg
        holding_n = self.ticks("holding", holding)

        # ---- pick -------------------------------------------------------------------------------
        peg = self.smooth("peg", o_pos, 0.15)  # at rest until grasped: the episode's mean
        grasp = tcfg.grasp_height * zax
        # two readings of the grasp point's offset from the hand, averaged
        gerr_now = 0.5 * ((peg + grasp - ee) + (o_minus_ee + grasp))
        gerr = self.smooth("gerr", gerr_now, trust + (1 - trust) * 0.4)
        gerr_slow = self.smooth("gerr_slow", gerr_now, trust + (1 - trust) * 0.15)
        gxy = np.linalg.norm(gerr[:, :2], axis=1)
        yaw_err = _wrap(yaw4 - eyaw, 0.5 * np.pi)
        aligned = self.ticks("aligned", (gxy < 0.004) & (np.abs(yaw_err) < 0.05)) >= 2
        # An off-centre grasp lets the peg pivot in the pads: close only on a settled, centred estimate.
        at_grasp = (np.linalg.norm(gerr_slow[:, :2], axis=1) < self.grasp_tol) \
            & (np.abs(gerr_slow[:, 2]) < self.grasp_tol + 0.001) & (np.abs(yaw_err) < 0.05)
        near = (gxy < 0.015) & (np.abs(gerr[:, 2]) < 0.02)
        closing = (self.ticks("at_grasp", at_grasp) >= 2) | holding | ((self.last_ticks("close") > 0) & near)
        close_n = self.ticks("close", closing)
        descending = ee[:, 2] < peg[:, 2] + grasp[:, 2] + self.hover - 0.01
        dz = np.where(aligned | (descending & (gxy < 0.01)), 0.0, self.hover)
        dz = np.where(gxy > 0.015, np.maximum(-gerr_now[:, 2], self.hover - 0.02), dz)
        pick = gerr_now + np.stack([np.zeros_like(dz), np.zeros_like(dz), dz], axis=1)
        # near the grasp point: a smaller fraction of a smoothed error (less jitter at the pads)
        fine = (gxy < 0.01)[:, None]
        fine_gain = self.fine_gain + trust * (self.trusted_gain - self.fine_gain)
        pick_move = np.where(fine, fine_gain[:, None] * (gerr + (pick - gerr_now)), self.gain * pick)
        pick_move = np.where((close_n > 0)[:, None], 0.0, pick_move)  # hold still while closing

        # ---- place ------------------------------------------------------------------------------
        # the peg's offset from the hand while held (constant in a firm grasp)
        grip_off = self.smooth("grip_off", 0.5 * (o_minus_ee + o_pos - ee), 0.05, restart=~holding)
        bottom_off = -hh * zax
        # three readings of the opening's offset from the peg's bottom point, averaged
        gap_now = (
            -(o_minus_hole + bottom_off) + (hole - o_pos - bottom_off) + (hole - ee - grip_off - bottom_off)
        ) / 3.0
        # While carrying, the peg moves centimetres per tick: only a short average keeps up. Over the
        # opening it moves slowly and longer averages start there.
        gap_fast = self.smooth("gap_fast", gap_now, 0.5)
        near_hole = np.linalg.norm(gap_fast[:, :2], axis=1) < 0.01
        # The peg moves with the hand: shift the averages by the height change the last action asked for (the
        # hand follows it closely in z; in xy it drifts by a good part of the small corrections it is asked for).
        dz_asked = self.last_move * np.array([0.0, 0.0, 1.0])
        gap = self.smooth("gap", gap_now, trust + (1 - trust) * 0.25, shift=-dz_asked, restart=~near_hole)
        gap_slow = self.smooth("gap_slow", gap_now, trust + (1 - trust) * 0.08, shift=-dz_asked, restart=~near_hole)
        gap = np.where(near_hole[:, None], gap, gap_now)
        # where earlier descents met the rim, the opening is (see below): m added to the centring estimates
        aim = self.state("aim", (2,))
        aim[~holding] = 0.0
        gap[:, :2] += aim
        gap_slow = gap_slow + np.concatenate([aim, np.zeros((len(gap), 1))], axis=1)
        exy = gap[:, :2]
        top_gap = -gap[:, 2]  # height of the peg's bottom above the walls' top
        square = np.abs(yaw4) < self.yaw_tol
        # on trusted readings the descent corrects as it goes, so it may start further off
        tol = np.array(self.xy_tol) + trust[:, None] * (self.trusted_tol - np.array(self.xy_tol))
        centred = self.ticks("centred", (np.abs(gap_slow[:, :2]) < tol).all(axis=1) & square)
        # averages need a few ticks to confirm; a trusted reading does at once
        centred_enough = centred >= np.where(trust > 0.5, 1, self.centred_ticks)
        clear = top_gap > 0.5 * self.carry
        dz_far = self.gain * (self.carry - top_gap)
        dz_near = self.fine_gain * _deadband(self.above - top_gap, self.z_band)
        # Once on the way down, keep going (position estimates are too noisy to judge the last millimetres)
        # unless the peg sits on the rim: it tips further in the pads (in the opening the hand straightens it;
        # the tilt is read with little noise), or it is not below the walls' top when it should be.
        was = self.last_ticks("descend")
        tilt = zax[:, :2]
        tilt_ref = self.smooth("tilt_ref", tilt, 0.0, restart=was == 0)  # mean tilt since the descent began
        top_seen = -gap_fast[:, 2]  # not shifted by the asked motion: a peg on the rim does not follow it
        tipped = (was > 0) & (top_seen > -0.003) \
            & (np.linalg.norm(tilt, axis=1) - np.linalg.norm(tilt_ref, axis=1) > self.rim_tilt)
        stalled = (was > (self.above + 0.003) / self.descend + 2) & (top_seen > -0.003)
        going = (was > 0) & ~tipped & ~stalled
        # A peg on the rim tips away from the side of the opening it missed: aim the next descent a step
        # toward the tilt change (the estimates were off by about that much).
        tip = tilt - tilt_ref
        step = self.rim_step * tip / np.maximum(np.linalg.norm(tip, axis=1, keepdims=True), 1e-9)
        aim += np.where(tipped[:, None], step, 0.0)
        descend = near_hole & (centred_enough | going)
        self.ticks("descend", descend)
        entering = descend & (top_seen < -0.001)  # in the opening: push on
        # ...unless the peg tips further in there (it is jammed against a wall): ease off while the hand
        # steers back over it
        jammed = entering & (np.linalg.norm(tilt, axis=1) - np.linalg.norm(tilt_ref, axis=1) > self.rim_tilt)
        push = np.where(jammed, self.ease, -self.push)
        dz = np.where(descend, np.where(entering, push, -self.descend), np.where(near_hole, dz_near, dz_far))
        # break the peg off the table gently: a fast first lift levers it round in the fresh grasp
        peg_bottom_z = peg_ee[:, 2] + ee[:, 2] - hh * np.abs(zax[:, 2])
        dz = np.where(peg_bottom_z < self.lift_gently, np.minimum(dz, self.lift_speed), dz)
        fine_gain = self.fine_gain + trust * (self.trusted_gain - self.fine_gain)
        dxy = np.where(near_hole[:, None], fine_gain[:, None] * exy, np.where(clear[:, None], self.gain * exy, 0.0))
        # On the way in, no corrections from position estimates or twists (they wedge the peg in the
        # opening). Once in it, the walls hold the peg's bottom, so a hand that drifts sideways (the ee_delta
        # IK does as it moves down) tilts the peg: steer the hand back over it by the tilt, which is read
        # with little noise.
        inserting = descend
        straighten = -self.tilt_gain * (hh + tcfg.grasp_height) * zax[:, :2]
        on_way = trust[:, None] * fine_gain[:, None] * exy  # with trusted readings, keep centring on the way in
        dxy = np.where(inserting[:, None], np.where(entering[:, None], straighten + on_way, on_way), dxy)
        place_move = np.concatenate([dxy, dz[:, None]], axis=1)
        # turn the peg square to the hole only once it is off the table, and gently
        place_yaw = np.where((peg_bottom_z > 0.02) & ~inserting,
                             np.clip(-self.gain * yaw4, -self.yaw_rate, self.yaw_rate), 0.0)

        close_ticks = self.close_ticks_for(self.close_ticks, self.close_rate)
        place = holding & (close_n >= close_ticks) | (holding_n > close_ticks)
        move = np.where(place[:, None], place_move, pick_move)
        dyaw = np.where(holding | (close_n > 0), np.where(place, place_yaw, 0.0), self.gain * yaw_err)
        grip = np.where(holding & place, -1.0, self.closing_grip(close_n, self.close_rate))
        return self.pack(self.move(move), grip, dyaw)
