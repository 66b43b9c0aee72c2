//===- Passes.cpp - registration of MegaTrain's passes --------------------===//
#include "passes/Passes.h"

void mt::registerPasses() {}
