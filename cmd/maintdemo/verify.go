package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// counterSpan is the range of values one slot's counter may take: slot i's
// counter starts at (i+1)*counterSpan, so a reply from another slot's
// counter is out of range.
const counterSpan = 1_000_000_000

// pipeDepth is how many INCRs a pipeline or a MULTI/EXEC of the soak holds.
const pipeDepth = 3

// maxAnomalies bounds the anomalies a slot describes (all are counted).
const maxAnomalies = 3

// verifier is one slot's verified writes. Its commands run one at a time
// (the slot is held), so the order of its commands is the order they were
// sent in and each command saw the effect of every earlier acknowledged one.
//
// The counter: every acknowledged INCR executed before its reply, so the
// replies strictly increase; one that failed (an error, whatever the error,
// or a reply that was another command's) may or may not have executed, at
// any time, so a reply is at most acked+unknown+1 (acked and unknown: the
// INCRs acknowledged and failed before it). Above that, an increment was
// applied twice. A reply not above the previous acknowledged one, or
// outside the slot's range, belongs to another command. The final value
// must lie in [acked, acked+unknown]: below, an acknowledged increment was
// lost; above, one was applied twice.
//
// The string: every SET writes a value naming the slot and the SET's number.
// A GET (and the final value) must hold the last acknowledged SET's value or
// one of a SET that failed (it may have executed late); an older
// acknowledged one, or nothing after a SET was acknowledged, is a lost
// write; a value of another slot, or no value the slot wrote, is another
// command's reply.
type verifier struct {
	id       int
	ctr, str string
	base     int64
	start    time.Time // the start of the load, for anomaly times

	acked, unknown int64 // INCRs acknowledged / with an unknown outcome
	lastRel        int64 // the last acknowledged INCR reply, less base
	extra          int64 // increments already found duplicated by replies

	sets       int64   // SETs sent (each SET's number is its count)
	lastSet    int64   // number of the last acknowledged SET, 0 if none
	failedSets []int64 // numbers of the SETs that failed

	lostReads  int64 // GETs that missed an acknowledged SET
	lostFinal  int64 // 1 if the final string value missed one
	mixed      int64
	anomalies  []string
	nAnomalies int
}

// newVerifier returns slot id's verifier; set its start before the load.
func newVerifier(prefix string, id int) *verifier {
	return &verifier{id: id,
		ctr:  prefix + "c:" + strconv.Itoa(id),
		str:  prefix + "s:" + strconv.Itoa(id),
		base: int64(id+1) * counterSpan}
}

func (v *verifier) note(format string, args ...any) {
	v.nAnomalies++
	if len(v.anomalies) < maxAnomalies {
		at := time.Since(v.start).Seconds()
		v.anomalies = append(v.anomalies, fmt.Sprintf("+%.3fs slot %d: ", at, v.id)+fmt.Sprintf(format, args...))
	}
}

// errMixedUp is the error the soak's op returns for a reply that belongs to
// another command: the command failed, and worse.
var errMixedUp = errors.New("maintdemo: a reply that belongs to another command")

// mixedErr reports whether err says the reply read was not of the command's
// type or not for its key: another command's reply.
func mixedErr(err error) bool {
	m := err.Error()
	return strings.Contains(m, "can't parse") || strings.Contains(m, "WRONGTYPE") ||
		strings.Contains(m, "not an integer")
}

// incr records one INCR's outcome; it returns errMixedUp for a reply that
// belongs to another command.
func (v *verifier) incr(val int64, err error) error {
	if err != nil {
		v.unknown++
		if mixedErr(err) {
			v.mixed++
			v.note("INCR %s failed with another command's reply: %v", v.ctr, err)
		}
		return err
	}
	rel := val - v.base
	switch {
	case rel < 1 || rel >= counterSpan:
		v.unknown++
		v.mixed++
		v.note("INCR %s replied %d, outside its range: another counter's reply", v.ctr, val)
		return errMixedUp
	case rel <= v.lastRel:
		v.unknown++
		v.mixed++
		v.note("INCR %s replied %d after %d: an older reply", v.ctr, rel, v.lastRel)
		return errMixedUp
	}
	// Replies strictly increase, so each is at least acked+1: a lost
	// increment shows only in the final value.
	if hi := v.acked + v.unknown + v.extra + 1; rel > hi {
		v.extra += rel - hi
		v.note("INCR %s replied %d after %d acknowledged and %d failed: %d increments applied twice", v.ctr, rel, v.acked, v.unknown, rel-hi)
	}
	v.acked++
	v.lastRel = rel
	return nil
}

func (v *verifier) setValue(n int64) string {
	return "s" + strconv.Itoa(v.id) + ":" + strconv.FormatInt(n, 10)
}

// set records one SET's outcome.
func (v *verifier) set(n int64, res string, err error) error {
	if err == nil && res != "OK" {
		v.mixed++
		v.note("SET %s replied %q: another command's reply", v.str, res)
		err = errMixedUp
	} else if err != nil && mixedErr(err) {
		v.mixed++
		v.note("SET %s failed with another command's reply: %v", v.str, err)
	}
	if err != nil {
		v.failedSets = append(v.failedSets, n)
		return err
	}
	v.lastSet = n
	return nil
}

// value judges a value read from the slot's string (found false: none).
// It returns whether it missed an acknowledged SET, and errMixedUp for a
// value the slot never wrote.
func (v *verifier) value(val string, found bool, what string) (lost bool, err error) {
	if !found {
		if v.lastSet > 0 {
			v.note("%s %s found nothing after SET %d was acknowledged", what, v.str, v.lastSet)
			return true, nil
		}
		return false, nil
	}
	slot, num, ok := strings.Cut(strings.TrimPrefix(val, "s"), ":")
	n, nerr := strconv.ParseInt(num, 10, 64)
	if !ok || !strings.HasPrefix(val, "s") || slot != strconv.Itoa(v.id) || nerr != nil || n < 1 || n > v.sets {
		v.mixed++
		v.note("%s %s read %q: a value it never wrote (another command's reply)", what, v.str, clip(val, 40))
		return false, errMixedUp
	}
	if n == v.lastSet {
		return false, nil
	}
	for _, f := range v.failedSets {
		if f == n {
			return false, nil
		}
	}
	v.note("%s %s read SET %d, acknowledged before SET %d, also acknowledged", what, v.str, n, v.lastSet)
	return true, nil
}

// get records one GET's outcome.
func (v *verifier) get(val string, err error) error {
	if errors.Is(err, redis.Nil) {
		if lost, _ := v.value("", false, "GET"); lost {
			v.lostReads++
		}
		return nil
	}
	if err != nil {
		if mixedErr(err) {
			v.mixed++
			v.note("GET %s failed with another command's reply: %v", v.str, err)
		}
		return err
	}
	lost, err := v.value(val, true, "GET")
	if lost {
		v.lostReads++
	}
	return err
}

// verifiedOp is the soak's op: on the slot's own keys, INCR (half of the
// commands), SET of a unique value, GET, and now and then a pipeline or a
// MULTI/EXEC of three INCRs, each reply checked by the slot's verifier.
func verifiedOp(rdb *redis.Client) op {
	return func(ctx context.Context, s *slot) error {
		v := s.state.(*verifier)
		switch k := s.n % 20; {
		case k < 10:
			val, err := rdb.Incr(ctx, v.ctr).Result()
			return v.incr(val, err)
		case k < 14:
			v.sets++
			n := v.sets
			res, err := rdb.Set(ctx, v.str, v.setValue(n), 0).Result()
			return v.set(n, res, err)
		case k < 18:
			val, err := rdb.Get(ctx, v.str).Result()
			return v.get(val, err)
		default:
			fill := func(p redis.Pipeliner) error {
				for range pipeDepth {
					p.Incr(ctx, v.ctr)
				}
				return nil
			}
			var cmds []redis.Cmder
			var err error
			if k == 18 {
				cmds, err = rdb.Pipelined(ctx, fill)
			} else {
				cmds, err = rdb.TxPipelined(ctx, fill)
			}
			var mixed error
			for i := range pipeDepth {
				var val int64
				cerr := err
				if i < len(cmds) {
					ic, ok := cmds[i].(*redis.IntCmd)
					if !ok {
						cerr = fmt.Errorf("maintdemo: pipeline command %d is a %T", i, cmds[i])
					} else {
						val, cerr = ic.Result()
					}
				} else if cerr == nil {
					cerr = fmt.Errorf("maintdemo: pipeline returned %d commands", len(cmds))
				}
				if e := v.incr(val, cerr); errors.Is(e, errMixedUp) {
					mixed = e
				}
			}
			if err == nil {
				err = mixed
			}
			return err
		}
	}
}

// slotCheck is what the final read found for one slot.
type slotCheck struct {
	lost, duplicated int64 // increments (plus 1 lost for a string that missed a SET)
}

// final checks the slot's keys as read from the backend at the end
// (counter found false: the key is missing).
func (v *verifier) final(counter int64, counterFound bool, str string, strFound bool) slotCheck {
	var c slotCheck
	rel := int64(0)
	if counterFound {
		rel = counter - v.base
	}
	if rel < 0 || rel >= counterSpan {
		v.note("final %s = %d: outside its range", v.ctr, counter)
		rel = 0
	}
	lostF := max(v.acked-rel, 0)
	dupF := max(rel-v.acked-v.unknown, 0)
	if lostF > 0 {
		v.note("final %s = +%d with %d INCRs acknowledged: %d lost", v.ctr, rel, v.acked, lostF)
	}
	if dupF > 0 {
		v.note("final %s = +%d with %d INCRs acknowledged and %d failed: %d applied twice", v.ctr, rel, v.acked, v.unknown, dupF)
	}
	c.lost = lostF
	c.duplicated = max(dupF, v.extra)
	if lost, _ := v.value(str, strFound, "final"); lost {
		v.lostFinal = 1
	}
	c.lost += v.lostReads + v.lostFinal
	return c
}
