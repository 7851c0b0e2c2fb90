// src/cuda/attention/flash/flash_env.h — how the flash kernels' tuning switches read the
// environment (OCTET_FLASH_PERSISTENT, OCTET_FLASH_HEAD_GROUP, OCTET_FLASH_BWD_HEAD_GROUP, ...; flash.h
// says what each means). Read at every call, so that one process can A/B them.
#pragma once

namespace octet::cuda::flash {

/// An on/off variable: true for "1", false for "0", `unset` when unset or empty. Anything else is
/// an octet::Error naming the variable, the value and what 1 means (`meaning`).
bool env_switch(const char* name, const char* meaning, bool unset);

/// A count variable: a whole number 0 to 999999, `unset` when unset or empty. Anything else
/// (a sign, letters, more digits) is an octet::Error naming the variable, the value and what the
/// number counts (`meaning`).
int env_count(const char* name, const char* meaning, int unset);

}  // namespace octet::cuda::flash
