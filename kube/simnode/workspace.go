package simnode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationHTTP makes a simulated pod stand for a web workspace, as a notebook server
// is: its process answers HTTP on the annotation's port (a page that names the pod, behind
// a token as Jupyter's is) and its log says where, with the token, as Jupyter's log does.
// Only the simulated kubelet reads it; allot submit writes it with --port, and on a real
// node it means nothing.
const AnnotationHTTP = "allot.dev/sim-http"

// workspace is one pod's simulated web process: a server on a loopback port of its own,
// which port-forward streams reach as a runtime's reach the port inside the pod.
type workspace struct {
	addr string
	srv  *http.Server
}

// httpPort is the port a simulated pod's process answers HTTP on; false when it runs none.
func httpPort(p *corev1.Pod) (int32, bool) {
	v, err := strconv.ParseInt(p.Annotations[AnnotationHTTP], 10, 32)
	if err != nil || v < 1 || v > 65535 {
		return 0, false
	}
	return int32(v), true
}

// workspaceToken is the token a simulated workspace asks for: the pod's own, so that its
// log and its page agree without keeping it anywhere.
func workspaceToken(uid types.UID) string {
	h := sha256.Sum256([]byte("allot-sim-workspace/" + string(uid)))
	return hex.EncodeToString(h[:24])
}

// listen returns the loopback address of the pod's process on port, starting the process
// the first time it is reached; an error, as a runtime's "connection refused", when the
// pod runs nothing on that port.
func (ws *workspaces) listen(p *corev1.Pod, port int32) (string, error) {
	want, ok := httpPort(p)
	if !ok || want != port {
		return "", fmt.Errorf("failed to connect to localhost:%d inside pod %s/%s: connection refused (nothing of it listens there)", port, p.Namespace, p.Name)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[p.UID]; w != nil {
		return w.addr, nil
	}
	if ws.byID == nil {
		ws.byID = map[types.UID]*workspace{}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	w := &workspace{addr: l.Addr().String(),
		srv: &http.Server{Handler: workspacePage(p.Namespace, p.Name, workspaceToken(p.UID)), ReadHeaderTimeout: 30 * time.Second}}
	ws.byID[p.UID] = w
	go func() { _ = w.srv.Serve(l) }()
	return w.addr, nil
}

// workspacePage answers as a notebook server does: with the token (in the query, or the
// cookie it then sets) a page naming the workspace, without it 403.
func workspacePage(namespace, name, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		given := r.URL.Query().Get("token")
		if c, err := r.Cookie("allot-sim-token"); given == "" && err == nil {
			given = c.Value
		}
		if given != token {
			http.Error(w, "403 Forbidden: this workspace wants its token (allot open NAME prints the URL with it)", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "allot-sim-token", Value: token, Path: "/", HttpOnly: true})
		if r.URL.Path == KernelChannels {
			echo(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html>
<html><head><title>JupyterLab — %[1]s (simulated)</title></head>
<body><h1>Workspace %[1]s</h1>
<p>Namespace %[2]s. This page stands for the notebook server of pod %[1]s: the pod runs on a
simulated node of allot up, whose kubelet serves it through the API server's port-forward.</p>
</body></html>
`, html.EscapeString(name), html.EscapeString(namespace))
	})
}

// KernelChannels is where a simulated workspace answers a websocket, as a notebook
// server's kernels do: each text message comes back as "echo: " and the message. As
// Jupyter does, it refuses a websocket whose Origin is not the host the browser asked for.
const KernelChannels = "/api/kernels/sim/channels"

func echo(w http.ResponseWriter, r *http.Request) {
	// The Upgrader's default origin check is Jupyter's: the Origin's host is the Host.
	ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return // the Upgrader has answered
	}
	defer ws.Close()
	for {
		kind, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if err := ws.WriteMessage(kind, append([]byte("echo: "), msg...)); err != nil {
			return
		}
	}
}

// workspaceLog is what a simulated pod's container logs: for a workspace, the lines a
// Jupyter server prints on start, with the URL and its token.
func workspaceLog(p *corev1.Pod) string {
	port, ok := httpPort(p)
	if !ok {
		return ""
	}
	at := time.Time{}
	if p.Status.StartTime != nil {
		at = p.Status.StartTime.Time
	}
	stamp := at.UTC().Format("2006-01-02 15:04:05.000")
	token := workspaceToken(p.UID)
	return fmt.Sprintf("[I %[1]s ServerApp] Serving notebooks from local directory: /workspace\n"+
		"[I %[1]s ServerApp] Jupyter Server (simulated by allot up) is running at:\n"+
		"[I %[1]s ServerApp] http://%[2]s:%[3]d/lab?token=%[4]s\n"+
		"[I %[1]s ServerApp]     http://127.0.0.1:%[3]d/lab?token=%[4]s\n", stamp, p.Name, port, token)
}
