// Package model is the consistency promise of spillway's replicas written
// as a porcupine model (github.com/anishathalye/porcupine), with the
// history types a run records and the code that turns a history into the
// operations porcupine checks.
//
// # The model
//
// One partition per endpoint ("<service>/<endpoint id>"); its state is
// whether the endpoint is served. Register makes it served, Deregister and
// Expire make it not served, Read (one replica's answer) must return the
// state. Bounded staleness is written as linearizability by widening every
// read: a read called at c and answered at r may have observed any state
// from c − Promise.Propagation to r, so its porcupine Call is c −
// Propagation (and earlier still while the replica read could not reach the
// store: see Outage). An expiry is an operation of the system whose window
// runs from the lease's earliest end (the last acknowledged heartbeat or
// registration plus the TTL) to its latest (the last attempt plus the TTL
// plus the decider's grace, pushed past any Pause). A Register or
// Deregister whose RPC failed has an unknown outcome: its Return is
// math.MaxInt64, so porcupine may place it anywhere after its call or never
// (after every other operation), which is porcupine's convention for an
// operation that did not return.
//
// # Usage
//
//	rec := model.NewRecorder()
//	call := rec.Now()
//	resp, err := client.Register(ctx, req)
//	rec.Write(model.OpRegister, replica, key, call, rec.Now(), model.OutcomeOf(err))
//	...
//	h := rec.History()
//	res, err := model.Check(h, promise, time.Minute)
//	if err == nil && res.Illegal > 0 {
//		model.Visualize(h, promise, res.IllegalKeys, "viz.html", time.Minute)
//	}
//
// # Concurrency
//
// A Recorder is safe for concurrent use; a History is a snapshot that is
// not changed after Recorder.History returns it. Check and Visualize only
// read it.
package model
