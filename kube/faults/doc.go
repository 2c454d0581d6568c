// Package faults holds Allot's own fault-injection test (faults_test.go): two scheduler
// replicas, the real binary, on the embedded control plane with simulated GPU nodes,
// under churn of single pods and gangs, while the leader is killed again and again and
// once paused past its lease. It asserts what must hold whatever happens: no GPU booked
// twice, no gang running partly beyond its grace period, no pod lost without a record.
// `make test` runs it for 90 s (each kind of fault once); `make faults` for ten minutes
// (FAULTS_TIME=30m for longer).
package faults
