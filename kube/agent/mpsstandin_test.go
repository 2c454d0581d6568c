package agent

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NVIDIA publishes no fake of nvidia-cuda-mps-control. This stand-in speaks the part of
// its control commands the agent uses, with the semantics NVIDIA documents:
//
//	-d                                   start a control daemon on $CUDA_MPS_PIPE_DIRECTORY, detached
//	                                     (none, status 100, where CUDA_VISIBLE_DEVICES is empty)
//	get_server_list                      the PIDs of its servers
//	set_default_active_thread_percentage N / set_default_device_pinned_mem_limit DEV V
//	set_active_thread_percentage PID N   / set_device_pinned_mem_limit PID DEV V
//	quit                                 stop the daemon
//
// and, standing in for a CUDA client connecting, "client PCT MEM": a server is started
// with the daemon's defaults if none runs, and the client gets the lower of what it asks
// and its server's limits (a client's own settings only narrow the daemon's).
// Without a daemon, a command prints the error the real program prints and fails.
// It is this test binary, run through a wrapper script (TestMain's "mps-control" mode).

// mpsStandIn writes the wrapper and returns its path.
func mpsStandIn(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "nvidia-cuda-mps-control")
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=mps-control %q \"$@\"\n", childEnv, self)
	return path, os.WriteFile(path, []byte(script), 0o755)
}

// mpsControlMain is the stand-in's command line.
func mpsControlMain() {
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	sock := filepath.Join(pipe, "control")
	if len(os.Args) > 1 && os.Args[1] == "-d" {
		// As the real one did on an H100 (driver 580.159.04): with CUDA_VISIBLE_DEVICES set
		// and empty (no GPU) it exits at once, status 100, printing nothing.
		if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok && v == "" {
			os.Exit(100)
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			fmt.Println("An instance of this daemon is already running")
			os.Exit(1)
		}
		_ = os.Remove(sock)
		self, _ := os.Executable()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"=mps-daemon")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for i := 0; i < 200; i++ { // until it listens
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				os.Exit(0)
			}
			time.Sleep(10 * time.Millisecond)
		}
		os.Exit(1)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println("Cannot find MPS control daemon process")
		os.Exit(1)
	}
	defer c.Close()
	in, replies := bufio.NewScanner(os.Stdin), bufio.NewReader(c)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) == "" {
			continue
		}
		fmt.Fprintln(c, in.Text())
		line, _ := replies.ReadString('\n')
		fmt.Print(strings.ReplaceAll(line, "|", "\n"))
	}
}

// mpsDaemonMain is the stand-in's daemon: it logs every command to the log directory.
func mpsDaemonMain() {
	pipe, logDir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	// The PID first: -d returns once the daemon listens, and tests read it then.
	_ = os.WriteFile(filepath.Join(pipe, "daemon.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	l, err := net.Listen("unix", filepath.Join(pipe, "control"))
	if err != nil {
		os.Exit(1)
	}
	logf, _ := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	var mu sync.Mutex
	defPct, defMem := 100, int64(0)
	type server struct {
		pct int
		mem int64
	}
	servers := map[int]*server{}
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewScanner(c)
			for r.Scan() {
				f := strings.Fields(r.Text())
				mu.Lock()
				fmt.Fprintln(logf, r.Text())
				reply := ""
				switch {
				case len(f) == 0:
				case f[0] == "get_server_list":
					var pids []string
					for pid := range servers {
						pids = append(pids, strconv.Itoa(pid))
					}
					reply = strings.Join(pids, "|")
				case f[0] == "set_default_active_thread_percentage" && len(f) == 2:
					defPct, _ = strconv.Atoi(f[1])
				case f[0] == "set_default_device_pinned_mem_limit" && len(f) == 3:
					defMem = mib(f[2])
				case f[0] == "set_active_thread_percentage" && len(f) == 3:
					pid, _ := strconv.Atoi(f[1])
					if s := servers[pid]; s != nil {
						s.pct, _ = strconv.Atoi(f[2])
					}
				case f[0] == "set_device_pinned_mem_limit" && len(f) == 4:
					pid, _ := strconv.Atoi(f[1])
					if s := servers[pid]; s != nil {
						s.mem = mib(f[3])
					}
				case f[0] == "client" && len(f) == 3:
					if len(servers) == 0 {
						servers[4242] = &server{pct: defPct, mem: defMem}
					}
					s := servers[4242]
					pct, _ := strconv.Atoi(f[1])
					mem := mib(f[2])
					if s.mem > 0 && (mem == 0 || mem > s.mem) {
						mem = s.mem
					}
					reply = fmt.Sprintf("%d %dM", min(pct, s.pct), mem)
				case f[0] == "quit":
					mu.Unlock()
					fmt.Fprintln(c)
					os.Exit(0)
				}
				mu.Unlock()
				fmt.Fprintln(c, reply)
			}
		}()
	}
}

func mib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(v, "M"), 10, 64)
	return n
}
