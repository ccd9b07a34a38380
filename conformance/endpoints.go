package conformance

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
)

// Database is one database of an endpoints file, the JSON object the
// peers' suites read from REDIS_ENDPOINTS_CONFIG_PATH: database name to
// {bdb_id, username, password, tls, raw_endpoints, endpoints}.
type Database struct {
	Name         string        `json:"-"`
	RawBdbID     any           `json:"bdb_id"` // a number or a numeric string
	Username     string        `json:"username"`
	Password     string        `json:"password"`
	TLS          bool          `json:"tls"`
	RawEndpoints []RawEndpoint `json:"raw_endpoints"`
	Endpoints    []string      `json:"endpoints"`
	OSSCluster   bool          `json:"oss_cluster"`
}

// RawEndpoint is one entry of raw_endpoints.
type RawEndpoint struct {
	Addr     []string `json:"addr"`
	AddrType string   `json:"addr_type"`
	DNSName  string   `json:"dns_name"`
	Port     int      `json:"port"`
	UID      string   `json:"uid"`
}

// LoadEndpoints reads an endpoints file.
func LoadEndpoints(path string) (map[string]Database, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("conformance: endpoints file: %w", err)
	}
	var dbs map[string]Database
	if err := json.Unmarshal(b, &dbs); err != nil {
		return nil, fmt.Errorf("conformance: endpoints file %s: %w", path, err)
	}
	for name, db := range dbs {
		db.Name = name
		dbs[name] = db
	}
	return dbs, nil
}

// BdbID returns the database id, 0 when absent or not a number.
func (d Database) BdbID() int {
	switch v := d.RawBdbID.(type) {
	case float64:
		return int(v)
	case string:
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}

// Addrs returns the addresses clients connect to, host:port: raw_endpoints'
// DNS names first (as redis-py and go-redis read them), else the endpoints
// URLs (redis:// or rediss://, port 6379 by default).
func (d Database) Addrs() ([]string, error) {
	var out []string
	for _, r := range d.RawEndpoints {
		if r.DNSName != "" && r.Port > 0 {
			out = append(out, net.JoinHostPort(r.DNSName, strconv.Itoa(r.Port)))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, e := range d.Endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("conformance: endpoint %q: %w", e, err)
		}
		port := u.Port()
		if port == "" {
			port = "6379"
		}
		out = append(out, net.JoinHostPort(u.Hostname(), port))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("conformance: database %s has no endpoint", d.Name)
	}
	return out, nil
}

// UsesTLS reports whether clients connect with TLS (tls, or a rediss://
// endpoint).
func (d Database) UsesTLS() bool {
	if d.TLS {
		return true
	}
	for _, e := range d.Endpoints {
		if u, err := url.Parse(e); err == nil && u.Scheme == "rediss" {
			return true
		}
	}
	return false
}
