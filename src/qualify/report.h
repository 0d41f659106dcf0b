// Qualification report: a terminal table (token bucket x backend: microseconds and % of the
// bandwidth floor; then each rejected or unsupported backend with its reason) and an SVG plot (time
// against tokens per backend, log-log, with the bandwidth floor) that opens in a browser.
#pragma once
#include <string>

#include "qualify/verdict.h"

namespace fp4moe {

std::string verdict_table(const Verdict& verdict);
std::string verdict_svg(const Verdict& verdict);

}  // namespace fp4moe
