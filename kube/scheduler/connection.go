package scheduler

import (
	"context"
	"log/slog"
	"time"
)

// The API server going away is handled here rather than left to the informers: client-go's
// reflectors back off up to 30 s (doubling from 0.8 s, with jitter) while it is down, so
// after an outage of half a minute the watches came back 9–20 s after the server did, and
// meanwhile the scheduler went on binding and evicting from what it saw before the outage.
// Instead the scheduler asks the server whether it is ready twice a second; after an
// outage it makes no decision until fresh informers have listed everything again, which
// they do as soon as the server answers.

// outageAfter is how long the server must fail to answer before the cache is taken for
// stale: a single slow answer under load is no outage, and starting over costs a LIST of
// every pod.
const outageAfter = 2 * time.Second

// readyEvery is how often the server is asked.
const readyEvery = 500 * time.Millisecond

func (s *Scheduler) watchConnection(ctx context.Context) {
	tick := time.NewTicker(readyEvery)
	defer tick.Stop()
	var failingSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.ready(ctx) {
			if !failingSince.IsZero() && s.stale.Load() {
				s.relist(ctx, time.Since(failingSince))
			}
			failingSince = time.Time{}
			continue
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if time.Since(failingSince) >= outageAfter && !s.stale.Swap(true) {
			slog.Warn("allot scheduler: the API server does not answer; no binds or evictions until it is back and everything is listed again")
		}
	}
}

func (s *Scheduler) ready(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
	return err == nil
}

// relist replaces the informers with fresh ones, listed from the server that came back;
// no cycle runs meanwhile.
func (s *Scheduler) relist(ctx context.Context, down time.Duration) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for ctx.Err() == nil {
		if s.stopInformers != nil {
			s.stopInformers()
		}
		err := s.start(ctx)
		if err == nil {
			break
		}
		slog.Warn("allot scheduler: listing again after an outage", "err", err)
		time.Sleep(readyEvery)
	}
	s.stale.Store(false)
	slog.Info("allot scheduler: the API server is back; listed everything again", "down", down.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	s.poke()
}
