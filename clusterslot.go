package maint

import (
	"errors"
	"strconv"
	"strings"

	"github.com/maintkit/maint/internal/slot"
)

// numSlots is the number of hash slots of a Redis cluster.
const numSlots = slot.N

// keySlot returns the hash slot of key (hash tags included).
func keySlot(key string) int { return slot.Of(key) }

// cmdSlot returns the hash slot of a command's first key, or -1 when the
// command has no key maint can find without the server's command table (it
// is then left to go-redis's routing and the server's redirects).
func cmdSlot(args []any) int {
	if len(args) == 0 {
		return -1
	}
	name, ok := args[0].(string)
	if !ok {
		return -1
	}
	pos := keyPos(name, args)
	if pos <= 0 || pos >= len(args) {
		return -1
	}
	switch k := args[pos].(type) {
	case string:
		return keySlot(k)
	case []byte:
		return keySlot(string(k))
	}
	return -1
}

// keyPos returns the position of the first key in a command's arguments, 0
// when it has none or is not known. Most commands take their key first; the
// exceptions that matter are listed.
func keyPos(name string, args []any) int {
	switch strings.ToLower(name) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		if len(args) > 3 && argString(args[2]) != "0" {
			return 3
		}
		return 0
	case "bitop", "object", "xinfo", "memory":
		return 2 // BITOP op dest, OBJECT ENCODING key, XINFO STREAM key, MEMORY USAGE key
	case "lmpop", "zmpop", "sintercard", "zintercard", "zunion", "zinter", "zdiff":
		return 2 // numkeys, then the keys
	case "blmpop", "bzmpop":
		return 3 // timeout, numkeys, then the keys
	case "ping", "echo", "hello", "auth", "select", "quit", "reset", "info", "time", "role",
		"cluster", "config", "client", "command", "script", "function", "acl", "debug", "module",
		"slowlog", "latency", "monitor", "lolwut", "asking", "readonly", "readwrite",
		"multi", "exec", "discard", "unwatch", "dbsize", "randomkey", "keys", "scan",
		"flushdb", "flushall", "save", "bgsave", "bgrewriteaof", "lastsave", "swapdb",
		"wait", "waitaof", "publish", "pubsub", "subscribe", "psubscribe", "unsubscribe",
		"punsubscribe", "sunsubscribe", "xread", "xreadgroup", "migrate", "failover",
		"replicaof", "slaveof", "shutdown", "sync", "psync":
		return 0
	}
	return 1
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// slotRange is an inclusive range of slots.
type slotRange struct{ lo, hi int }

// errSlots is wrapped by parseSlots' errors.
var errSlots = errors.New("maint: malformed slot list")

// parseSlots reads a slot list as SMIGRATING and SMIGRATED carry it:
// "123,456-789", spaces allowed around the items.
func parseSlots(s string) ([]slotRange, error) {
	var out []slotRange
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			return nil, errSlots
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
				return nil, errSlots
			}
		}
		if a < 0 || b >= numSlots || a > b {
			return nil, errSlots
		}
		out = append(out, slotRange{a, b})
	}
	return out, nil
}
