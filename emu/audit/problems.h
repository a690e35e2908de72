// SPDX-License-Identifier: BSD-2-Clause
// The checker's one way to record a problem: a printf-formatted line (emu/check.h).
#pragma once
#include <cstdarg>
#include <string>
#include <vector>

namespace emu {

void add_problem(std::vector<std::string>* problems, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void add_problem_v(std::vector<std::string>* problems, const char* fmt, va_list ap);

}  // namespace emu
