// Package subset gives each client of a service a subset of its
// endpoints, so that millions of clients need not each connect to every
// server (a server's memory, a restart's TLS-handshake storm), while every
// endpoint still gets the same share of clients.
//
// Clients are counted, not named: spillway knows how many streams each
// replica holds per client zone (a Group), and each replica numbers its
// own streams of a group 0..n-1 (a slot; a stream that leaves gives its
// slot to the group's last one). Assign gives every slot a subset.
//
// # Deterministic mode
//
// Within each client zone the traffic goes to localities as the zone plan
// routes it (package zoneaware); the subset respects that: a slot of zone
// z holds max(1, round(Size × share)) endpoints of every locality L its
// route sends a share to (at most all of L's). Each (zone, locality) pair
// is balanced on its own: over every slot of zone z on every replica, the
// number of slots holding an endpoint of L differs by at most one between
// L's endpoints. Since every slot of the pair sends the same share of its
// traffic to each endpoint it holds in L, every endpoint of L gets the
// same expected share of the pair's traffic, to one slot in the count,
// and so of every zone's: connections per endpoint max/avg is about
// 1 + zones/(M·Size/N), and the zone plan's locality weights and capacity
// bounds hold as without subsets.
//
// # Edge weights
//
// When M·k is not a multiple of N (k endpoints of a locality a slot, N
// endpoints there) the counts cannot be equal: some endpoints are held
// once more. Assign then gives the slots fractional endpoint weights
// (Weights) so that each endpoint's expected share is the same: in a slot
// that holds an endpoint above the target M·k/N and one below it, weight
// moves from the first to the second, or along a chain of slots (a to b
// in one, b to c in another: b keeps its total), found breadth first;
// each slot's weights in a locality still add up to k, so its traffic to
// the locality is what the zone plan says. Weights stay in [0.01, 2].
// Dense pairs come out even (TestEdgesEvenShares: max/avg 1 where the
// counts give up to 1.43); where endpoints are held by few slots a group
// of them may share slots only among themselves, and the weights then
// even out what they can, never making it worse. With k = 1 nothing can
// move. The xDS server sends them as endpoint weights (scaled to
// integers); grpc-go's round_robin ignores endpoint weights, so they
// reach clients that pick by weight (clientlib/wrr), and the others get
// the counts' balance.
//
// Assign is incremental: it starts from the previous assignment and moves
// as few (slot, endpoint) pairs as balance needs. A new slot takes the
// least-held endpoints; a slot gone, or an endpoint gone, frees its pairs
// and the few slots that then hold too much or too little trade one
// endpoint each; a new endpoint takes pairs from the most-held ones until
// it holds its share. At M = 1,000 slots, N = 100, Size = 10 one endpoint
// coming or going changes about 2 % of the pairs, one client 0.1 %
// (0.26 % when the one leaving is not its group's last: the last slot's
// client moves into the freed slot and takes its subset)
// (TestChurn). Ties are broken by a hash of the service, the slot and the
// endpoint, so the result does not depend on map order and the same
// inputs from scratch give the same subsets on any replica.
//
// # Random mode
//
// For comparison: each slot takes, per locality, the endpoints that rank
// first by a hash of the slot and the endpoint (gRPC's random subsetting,
// gRFC A68, in effect). The slots holding one endpoint then follow a
// binomial law B(M, s/N): max/avg grows as the standard deviation
// sqrt(M·s/N·(1−s/N)) over the mean (about 1.25 at M = 1,000, N = 100,
// s = 10).
package subset
