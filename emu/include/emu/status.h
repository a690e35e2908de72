// The status type used inside the device model; the verbs edge maps it to an errno.
#pragma once
#include <cerrno>

namespace emu {

enum class Status {
  ok = 0,
  invalid,         // bad argument or state transition
  no_memory,       // segment or table full
  busy,            // object still in use
  not_found,       // no such object
  not_supported,
  layout_mismatch, // shared segment made by another layout version
  io,              // system-level failure
};

inline int to_errno(Status s) {
  switch (s) {
    case Status::ok: return 0;
    case Status::invalid: return EINVAL;
    case Status::no_memory: return ENOMEM;
    case Status::busy: return EBUSY;
    case Status::not_found: return ENOENT;
    case Status::not_supported: return EOPNOTSUPP;
    case Status::layout_mismatch: return EPROTO;
    case Status::io: return EIO;
  }
  return EIO;
}

const char* status_name(Status s);

}  // namespace emu
