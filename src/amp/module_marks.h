// Whether the code running on this thread is inside a module that amp.fp32_modules marks, under
// any policy or none (amp/emulate.h ModuleCall keeps the count; the fp32 regions it opens need a
// low-precision policy, this does not). Apart from emulate.h so that its few readers
// (diagnose's forward work: the products computed there are fp32 ones) do not make every
// includer of emulate.h depend on it.
#pragma once

namespace amptune::amp {

// True while a ModuleCall of a marked module (its name or an ancestor's matches a glob of the
// installed ModuleMap) is open on this thread.
bool in_marked_module();

}  // namespace amptune::amp
