// Each strategy family's step program, one family per file (projection/program_*.cpp), each
// mirroring the order of operations in strategies/<name>.cpp. Called by step_program
// (projection/strategy_model.cpp) once the configuration is known to fit the machine; each returns
// why it cannot run, or "" with out's actors (and stages, bookkeeping) set.
#pragma once

#include <string>

#include "projection/step_builder.h"
#include "projection/strategy_model.h"

namespace pb::projection {

std::string regular_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out);
std::string dp_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out);
std::string ddp_program(const Profile& p, const Machine& m, const Config& c, StepBuilder& bl, StepProgram& out);
// mp, pipeline (c.schedule, c.recompute) and dp<D>xpp<P>.
std::string pipeline_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out);
// fsdp and zero2.
std::string fsdp_program(const Profile& p, const Machine& m, const Config& c, StepBuilder& bl, StepProgram& out);
// tp and dp<D>xtp<T>.
std::string tp_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out);

}  // namespace pb::projection
