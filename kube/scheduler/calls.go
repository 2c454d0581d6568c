package scheduler

import (
	"context"
	"io"
	"net/http"
	"time"
)

// A slow or flaky API server (a loaded control plane, a lossy network between it and the
// scheduler) must cost the scheduler time, never its books or a stuck worker: every call
// but a watch has a deadline, and a bind that may or may not have landed is looked up
// before anything is concluded from it (bind.go).

// CallTimeout bounds each request the scheduler makes other than a watch, reading its
// answer included. client-go sets none (rest.Config.Timeout would also end every watch
// at that age), so a request on a connection that died without a reset waits until the
// kernel gives up, minutes later, holding a bind worker or a status writer meanwhile.
const CallTimeout = 15 * time.Second

// deadlines is a RoundTripper giving each request but a watch a deadline of d.
type deadlines struct {
	next http.RoundTripper
	d    time.Duration
}

func withDeadlines(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper { return deadlines{next: next, d: d} }
}

func (t deadlines) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") == "true" {
		return t.next.RoundTrip(r)
	}
	ctx, cancel := context.WithTimeout(r.Context(), t.d)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	// The deadline also covers reading the answer: it ends when the body is closed.
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
