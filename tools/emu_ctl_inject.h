// SPDX-License-Identifier: BSD-2-Clause
// emu-ctl's inject command (emu_ctl_inject.cpp); attach gives the fabric's segment or nullptr.
#pragma once
#include "emu/segment.h"

int emu_ctl_inject(int argc, char** argv, emu::Segment* (*attach)());
