// Projection: every strategy's step time, its parts and its memory on machines and device counts
// one does not have, from a measured per-layer profile (profile.json) and a machine description
// (machines/*.json: peak FLOP/s, memory, alpha-beta link costs per collective and algorithm).
// A step is a plan (plan/plan.h): priced action by action into one program of compute and
// communication operations per worker and played by one event simulator (blocking rendezvous for
// send/recv and collectives, CPU cores shared between worker threads, collectives beside compute
// only where the machine overlaps them). Formulas and assumptions: docs/projection.md.
// It knows plans, not strategies: scenarios/ makes the plans of strategies' configurations.
// The pieces, one idea per header, all of them here for the projection's users.
#pragma once

#include "projection/links.h"
#include "projection/machine.h"
#include "projection/options.h"
#include "projection/plan_price.h"
#include "projection/profile.h"
#include "projection/validation.h"
