package mainttest

import (
	"strconv"
	"strings"
)

// keySpec says where a command's keys are, in Redis's argv positions (the
// command name is argv[0]).
type keySpec struct {
	kind uint8
	// ksRange: argv[first..last] by step; last < 0 counts from the end (-1
	// is the last argument). ksNumkeys: argv[first..last] (fixed keys, if
	// first > 0), then argv[numkeys] is a count of keys that follow it.
	// ksSub: a subcommand at argv[1], the key at argv[2].
	first, last, step int
	numkeys           int
}

const (
	ksRange uint8 = iota
	ksNumkeys
	ksStreams // XREAD, XREADGROUP: the first half of the arguments after STREAMS
	ksSub
)

// commandKeys is the key table of the commands the emulated cluster routes.
// Commands not in it (PING, INFO, CLIENT, SCAN, PUBLISH, ...) have no keys
// and are served by any node, as in a real cluster.
var commandKeys = func() map[string]keySpec {
	m := map[string]keySpec{}
	one := keySpec{kind: ksRange, first: 1, last: 1, step: 1}
	all := keySpec{kind: ksRange, first: 1, last: -1, step: 1}
	two := keySpec{kind: ksRange, first: 1, last: 2, step: 1}
	set := func(spec keySpec, names string) {
		for n := range strings.FieldsSeq(names) {
			m[n] = spec
		}
	}
	set(one, `GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX APPEND STRLEN
		INCR DECR INCRBY DECRBY INCRBYFLOAT GETRANGE SETRANGE SUBSTR GETBIT SETBIT
		BITCOUNT BITPOS BITFIELD BITFIELD_RO TYPE TTL PTTL EXPIRE PEXPIRE
		EXPIREAT PEXPIREAT EXPIRETIME PEXPIRETIME PERSIST DUMP RESTORE
		HSET HSETNX HGET HMSET HMGET HDEL HLEN HEXISTS HKEYS HVALS HGETALL
		HINCRBY HINCRBYFLOAT HSTRLEN HSCAN HRANDFIELD HEXPIRE HPEXPIRE
		HEXPIREAT HPEXPIREAT HTTL HPTTL HEXPIRETIME HPEXPIRETIME HPERSIST
		HGETDEL HGETEX HSETEX
		LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LREM
		LTRIM LINSERT LPOS
		SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SSCAN
		ZADD ZREM ZRANGE ZRANGEBYSCORE ZREVRANGE ZREVRANGEBYSCORE
		ZRANGEBYLEX ZREVRANGEBYLEX ZCARD ZSCORE ZMSCORE ZINCRBY ZRANK
		ZREVRANK ZCOUNT ZLEXCOUNT ZPOPMIN ZPOPMAX ZREMRANGEBYRANK
		ZREMRANGEBYSCORE ZREMRANGEBYLEX ZSCAN ZRANDMEMBER
		XADD XLEN XRANGE XREVRANGE XDEL XTRIM XACK XCLAIM XAUTOCLAIM
		XPENDING XSETID
		PFADD GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH GEORADIUS GEORADIUS_RO
		GEORADIUSBYMEMBER GEORADIUSBYMEMBER_RO SORT SORT_RO SPUBLISH`)
	set(all, `DEL UNLINK EXISTS TOUCH MGET WATCH PFCOUNT PFMERGE SINTER SUNION
		SDIFF SINTERSTORE SUNIONSTORE SDIFFSTORE SSUBSCRIBE SUNSUBSCRIBE`)
	set(keySpec{kind: ksRange, first: 1, last: -1, step: 2}, `MSET MSETNX`)
	set(two, `RENAME RENAMENX COPY SMOVE LMOVE RPOPLPUSH BLMOVE BRPOPLPUSH
		ZRANGESTORE GEOSEARCHSTORE LCS`)
	set(keySpec{kind: ksRange, first: 1, last: -2, step: 1}, `BLPOP BRPOP BZPOPMIN BZPOPMAX`)
	set(keySpec{kind: ksRange, first: 2, last: -1, step: 1}, `BITOP`)
	set(keySpec{kind: ksNumkeys, numkeys: 2}, `EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO BLMPOP BZMPOP`)
	set(keySpec{kind: ksNumkeys, numkeys: 1}, `ZUNION ZINTER ZDIFF ZINTERCARD SINTERCARD LMPOP ZMPOP`)
	set(keySpec{kind: ksNumkeys, first: 1, last: 1, numkeys: 2}, `ZUNIONSTORE ZINTERSTORE ZDIFFSTORE`)
	set(keySpec{kind: ksStreams}, `XREAD XREADGROUP`)
	set(keySpec{kind: ksSub}, `OBJECT XINFO XGROUP`)
	m["MEMORY"] = keySpec{kind: ksSub}
	return m
}()

// keysOf appends the keys of command name (upper case) with arguments args
// (argv[1:]) to dst and returns it. The keys alias args. A command not in
// the table, or whose arguments do not say where its keys are (a bad
// numkeys, a missing STREAMS), has none: the backend answers it.
func keysOf(dst [][]byte, name string, args [][]byte) [][]byte {
	spec, ok := commandKeys[name]
	if !ok {
		return dst
	}
	argc := len(args) + 1 // as Redis counts, with the name
	at := func(i int) []byte { return args[i-1] }
	switch spec.kind {
	case ksRange:
		last := spec.last
		if last < 0 {
			last += argc
		}
		for i := spec.first; i <= last && i < argc; i += spec.step {
			dst = append(dst, at(i))
		}
	case ksNumkeys:
		if spec.first > 0 {
			for i := spec.first; i <= spec.last && i < argc; i++ {
				dst = append(dst, at(i))
			}
		}
		if spec.numkeys >= argc {
			return dst
		}
		n, err := strconv.Atoi(string(at(spec.numkeys)))
		if err != nil || n < 0 || n > argc-spec.numkeys-1 {
			return dst
		}
		for i := spec.numkeys + 1; i <= spec.numkeys+n; i++ {
			dst = append(dst, at(i))
		}
	case ksStreams:
		for i := 1; i < argc; i++ {
			if strings.EqualFold(string(at(i)), "STREAMS") {
				rest := argc - i - 1
				for j := i + 1; j <= i+rest/2; j++ {
					dst = append(dst, at(j))
				}
				break
			}
		}
	case ksSub:
		if argc < 3 {
			return dst
		}
		sub := strings.ToUpper(string(at(1)))
		switch {
		case name == "OBJECT" && sub != "HELP",
			name == "MEMORY" && sub == "USAGE",
			name == "XINFO" && sub != "HELP",
			name == "XGROUP" && sub != "HELP":
			dst = append(dst, at(2))
		}
	}
	return dst
}
