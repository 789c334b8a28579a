package main

// The pool's endpoints come from a file the picker watches (a ConfigMap
// mounted in Kubernetes, or any file an operator or controller writes). A
// file that does not parse or does not check keeps the last good set: the
// error is logged and counted, and routing goes on.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

// Role is what an endpoint does in a P/D pool.
type Role string

const (
	RoleBoth    Role = "both"    // prefill and decode (an aggregated pool)
	RoleDecode  Role = "decode"  // decode only: picked by eldr
	RolePrefill Role = "prefill" // prefill only: picked by load
)

// Engine names the metric names an endpoint exposes.
type Engine string

const (
	EngineVLLM   Engine = "vllm"
	EngineSGLang Engine = "sglang"
)

// EndpointConfig is one model server as the config file names it.
type EndpointConfig struct {
	// Address is what the gateway connects to, "ip:port" (the Endpoint
	// Picker Protocol's format).
	Address string `json:"address"`
	// Worker is eldr's worker id for it (the table's ids, or eldrd's). Unset:
	// the position among the decode-capable endpoints.
	Worker *int32 `json:"worker,omitempty"`
	Role   Role   `json:"role,omitempty"`   // default both
	Engine Engine `json:"engine,omitempty"` // default vllm
	// Metrics is its Prometheus endpoint; default http://<address>/metrics,
	// "none" = not scraped (load is then the picker's own count).
	Metrics string `json:"metrics,omitempty"`
}

// Config is the watched file.
type Config struct {
	// Models the pool serves (the body's "model"); empty = any.
	Models    []string         `json:"models,omitempty"`
	Endpoints []EndpointConfig `json:"endpoints"`
}

// maxConfigBytes bounds what the watcher reads: a config is a list of
// endpoints, not a data set.
const maxConfigBytes = 4 << 20

// parseConfig reads and checks a config (YAML or JSON). Every endpoint gets
// its defaults filled in, and a worker id.
func parseConfig(data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config is %d bytes (at most %d)", len(data), maxConfigBytes)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("config does not parse: %w", err)
	}
	if len(c.Endpoints) == 0 {
		return nil, errors.New("config lists no endpoints")
	}
	addresses := map[string]bool{}
	workers := map[int32]string{}
	next := int32(0)
	for i := range c.Endpoints {
		e := &c.Endpoints[i]
		if err := checkAddress(e.Address); err != nil {
			return nil, fmt.Errorf("endpoint %d: %w", i, err)
		}
		if addresses[e.Address] {
			return nil, fmt.Errorf("endpoint %d: address %s is listed twice", i, e.Address)
		}
		addresses[e.Address] = true
		switch e.Role {
		case "":
			e.Role = RoleBoth
		case RoleBoth, RoleDecode, RolePrefill:
		default:
			return nil, fmt.Errorf("endpoint %s: role %q (decode, prefill or both)", e.Address, e.Role)
		}
		switch e.Engine {
		case "":
			e.Engine = EngineVLLM
		case EngineVLLM, EngineSGLang:
		default:
			return nil, fmt.Errorf("endpoint %s: engine %q (vllm or sglang)", e.Address, e.Engine)
		}
		switch {
		case e.Metrics == "":
			e.Metrics = "http://" + e.Address + "/metrics"
		case e.Metrics == "none":
		default:
			u, err := url.Parse(e.Metrics)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("endpoint %s: metrics %q is not an http(s) URL", e.Address, e.Metrics)
			}
		}
		if e.Role == RolePrefill {
			if e.Worker != nil {
				return nil, fmt.Errorf("endpoint %s: a prefill endpoint has no eldr worker id", e.Address)
			}
			continue
		}
		if e.Worker == nil {
			id := next
			e.Worker = &id
		}
		if *e.Worker < 0 {
			return nil, fmt.Errorf("endpoint %s: worker %d (ids are >= 0)", e.Address, *e.Worker)
		}
		if other, dup := workers[*e.Worker]; dup {
			return nil, fmt.Errorf("endpoints %s and %s have the same worker id %d", other, e.Address, *e.Worker)
		}
		workers[*e.Worker] = e.Address
		next = max(next, *e.Worker) + 1
	}
	if len(workers) == 0 {
		return nil, errors.New("config has no decode endpoint (role decode or both)")
	}
	for _, m := range c.Models {
		if m == "" {
			return nil, errors.New("models lists an empty name")
		}
	}
	return &c, nil
}

// checkAddress accepts "ip:port" with a literal IPv4 or IPv6 address.
func checkAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("address %q is not ip:port", a)
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("address %q: %q is not an IP address", a, host)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("address %q: port %q", a, port)
	}
	return nil
}

// fileStamp says whether a file changed since it was last read. Polling,
// not inotify: a Kubernetes ConfigMap is updated by swapping a symlink,
// which inotify watches on the file itself miss.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}, nil
}

// modelServed: the body's model is one the pool serves.
func (c *Config) modelServed(model string) bool {
	if len(c.Models) == 0 {
		return true
	}
	for _, m := range c.Models {
		if strings.EqualFold(m, model) {
			return true
		}
	}
	return false
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
