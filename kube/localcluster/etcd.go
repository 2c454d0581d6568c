package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd runs an etcd member in this process, on loopback ports chosen by the kernel,
// keeping its data under dir so that a restart finds the cluster as it was.
func startEtcd(ctx context.Context, dir string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// A laptop cluster trades crash durability for speed: without an fsync per commit the
	// API server keeps up with hundreds of writes a second. A clean stop loses nothing.
	cfg.UnsafeNoFsync = true
	// One member: nobody to lose an election to. A short tick elects it within tens of
	// milliseconds instead of tenths of a second (every test starts a cluster).
	cfg.TickMs, cfg.ElectionMs = 10, 100
	var e *embed.Etcd
	var client url.URL
	// The ports are free when chosen but may be taken before etcd binds them (another
	// cluster starting beside this one, as parallel tests do): then choose again.
	for attempt := 1; ; attempt++ {
		var peer url.URL
		var err error
		if client, peer, err = freeURLs(2); err != nil {
			return nil, "", err
		}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			return nil, "", fmt.Errorf("starting etcd: %w", err)
		}
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd did not become ready within 60s")
	case <-ctx.Done():
		e.Close()
		return nil, "", ctx.Err()
	}
	return e, client.String(), nil
}

// freeURLs reserves loopback ports (a brief race with other processes is possible).
func freeURLs(n int) (url.URL, url.URL, error) {
	var out []url.URL
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return url.URL{}, url.URL{}, err
		}
		out = append(out, url.URL{Scheme: "http", Host: l.Addr().String()})
		l.Close()
	}
	return out[0], out[1], nil
}
