// Whether a TCP port is taken on this host, checked the way a c10d store binds it (the wildcard
// address, IPv6 dual-stack or else IPv4, SO_REUSEADDR so a closed store's TIME_WAIT does not
// count). The rank-0 node of a round asks this before starting workers (JobSupervisor): another
// process holding the port would make the store fail and cost the job a restart.
// Thread safety: any thread. Errors: a socket that cannot be made at all counts as free (the
// worker then reports what its own bind finds).
#pragma once

#include <cstdint>

namespace elastic::node {

bool tcp_port_in_use(std::uint16_t port);

}  // namespace elastic::node
