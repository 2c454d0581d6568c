package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Dialer opens a port-forward connection to the pod's port through the API server, with
// client-go's port-forward client (SPDY over a websocket, falling back to SPDY, as kubectl
// does), as rc's identity.
func Dialer(rc *rest.Config, client kubernetes.Interface, namespace, pod string) (httpstream.Dialer, error) {
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	plain := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	tunneling, err := portforward.NewSPDYOverWebsocketDialer(url, rc)
	if err != nil {
		return nil, err
	}
	return portforward.NewFallbackDialer(tunneling, plain, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	}), nil
}

// Dial is one TCP connection to port of the pod, as a net.Conn: a port-forward connection
// of its own, with its data and error streams, closed with it. What the kubelet or the
// runtime answers on the error stream ("connection refused" inside the pod) comes back as
// the error of a Read, in place of a bare end of stream.
func Dial(ctx context.Context, d httpstream.Dialer, namespace, pod string, port int) (net.Conn, error) {
	type dialed struct {
		c   httpstream.Connection
		err error
	}
	// The dialer takes no context: a dial that outlives ctx is closed when it returns.
	ch := make(chan dialed, 1)
	go func() {
		c, _, err := d.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{c, err}
	}()
	var conn httpstream.Connection
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, r.err)
		}
		conn = r.c
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: error stream: %w", namespace, pod, err)
	}
	errStream.Close() // nothing is written on it; the other side writes what went wrong
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: data stream: %w", namespace, pod, err)
	}
	c := &streamConn{conn: conn, data: data, failed: make(chan struct{}),
		addr: podAddr(fmt.Sprintf("%s/%s:%d", namespace, pod, port))}
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			c.fail(fmt.Errorf("port-forward to pod %s/%s port %d: reading its error stream: %w", namespace, pod, port, err))
		case len(msg) > 0:
			c.fail(fmt.Errorf("port-forward to pod %s/%s port %d: %s", namespace, pod, port, msg))
		default:
			c.fail(nil)
		}
	}()
	return c, nil
}

// Check dials port of the pod once and waits a moment for the other side's refusal: the
// API server's (RBAC: create on pods/portforward) comes at once, as does the runtime's
// when nothing listens on the port inside the pod. Nothing is written to the port.
func Check(ctx context.Context, d httpstream.Dialer, namespace, pod string, port int) error {
	conn, err := Dial(ctx, d, namespace, pod, port)
	if err != nil {
		return err
	}
	c := conn.(*streamConn)
	defer c.Close()
	select {
	case <-c.failed:
		return c.err
	case <-time.After(time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// streamConn is a port-forward data stream as a net.Conn. Deadlines are not supported by
// the streams: they are accepted and ignored (the HTTP transport above keeps its own).
type streamConn struct {
	conn   httpstream.Connection
	data   httpstream.Stream
	addr   podAddr
	once   sync.Once
	failed chan struct{}
	err    error
}

func (c *streamConn) fail(err error) {
	c.once.Do(func() { c.err = err; close(c.failed) })
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.data.Read(b)
	if err != nil && n == 0 {
		// The stream ends when the pod's side refuses or closes: say why where the
		// error stream does (it is written before the data stream is closed).
		select {
		case <-c.failed:
			if c.err != nil {
				return 0, c.err
			}
		case <-time.After(200 * time.Millisecond):
		}
	}
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) { return c.data.Write(b) }

func (c *streamConn) Close() error {
	c.data.Close()
	return c.conn.Close()
}

func (c *streamConn) LocalAddr() net.Addr              { return c.addr }
func (c *streamConn) RemoteAddr() net.Addr             { return c.addr }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// podAddr names the far end of a forwarded connection: namespace/pod:port.
type podAddr string

func (a podAddr) Network() string { return "portforward" }
func (a podAddr) String() string  { return string(a) }
