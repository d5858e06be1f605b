// Scenarios: the configurations `project` prices (a strategy at a device count and batch, with
// its options), the plans their runs would run, and what the projection predicts for them. It
// sits above both the strategies (which make plans) and the projection (which prices plans):
// the pieces, one idea per header, all of them here for project's users.
#pragma once

#include "projection/projection.h"
#include "scenarios/config.h"
#include "scenarios/predict.h"
#include "scenarios/strategy_model.h"
