package mainttest

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/maintkit/maint/internal/slot"
)

// NumSlots is the number of hash slots of a Redis cluster.
const NumSlots = slot.N

// SlotRange is an inclusive range of hash slots, Start <= End < NumSlots.
type SlotRange struct {
	Start, End int
}

// String formats the range as CLUSTER and SMIGRATED payloads do: "5" for a
// single slot, "0-5460" for a range.
func (r SlotRange) String() string {
	if r.Start == r.End {
		return strconv.Itoa(r.Start)
	}
	return strconv.Itoa(r.Start) + "-" + strconv.Itoa(r.End)
}

// errBadSlots is wrapped by every ParseSlots error.
var errBadSlots = errors.New("mainttest: bad slot list")

// ParseSlots parses a slot list in the form SMIGRATING and SMIGRATED carry:
// comma-separated slots and inclusive ranges, such as "123,456,789-1000".
// Spaces around items are ignored. The ranges are returned sorted and
// merged; an empty list, a slot outside 0..16383 or a reversed range is an
// error.
func ParseSlots(s string) ([]SlotRange, error) {
	var out []SlotRange
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		start, err := parseSlot(lo)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", errBadSlots, s, err)
		}
		end := start
		if isRange {
			if end, err = parseSlot(hi); err != nil {
				return nil, fmt.Errorf("%w %q: %v", errBadSlots, s, err)
			}
			if end < start {
				return nil, fmt.Errorf("%w %q: reversed range %q", errBadSlots, s, item)
			}
		}
		out = append(out, SlotRange{start, end})
	}
	return mergeRanges(out), nil
}

func parseSlot(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("slot %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("slot %q", s)
		}
	}
	n, _ := strconv.Atoi(s)
	if n >= NumSlots {
		return 0, fmt.Errorf("slot %d out of range", n)
	}
	return n, nil
}

// mergeRanges sorts rs and merges overlapping and adjacent ranges.
func mergeRanges(rs []SlotRange) []SlotRange {
	if len(rs) == 0 {
		return nil
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Start <= last.End+1 {
			last.End = max(last.End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// FormatSlots formats ranges as a slot list ("0-100,200"), the inverse of
// ParseSlots.
func FormatSlots(rs []SlotRange) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.String())
	}
	return b.String()
}

// KeySlot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key, or of its hash tag, modulo 16384. The hash tag is
// what lies between the first '{' and the first '}' after it, when that is
// not empty: "{user1}.name" and "{user1}.mail" share a slot.
func KeySlot[K ~string | ~[]byte](key K) int { return slot.Of(key) }
