package classify

import "testing"

func TestJudge(t *testing.T) {
	const old = "127.0.0.2:6379"
	cases := []struct {
		name string
		in   Input
		want Verdict
	}{
		{"unreadable address", Input{Remote: "", Retiring: old, Identifying: true}, Unknown},
		{"unreadable address after release", Input{Remote: "", Retiring: old, Released: true}, Unknown},
		{"landed back on the retiring node", Input{Remote: old, Retiring: old, Identifying: true}, Doomed},
		{"landed back after release is still doomed", Input{Remote: old, Retiring: old, Identifying: true, Released: true}, Doomed},
		{"new IP same port", Input{Remote: "127.0.0.3:6379", Retiring: old, Identifying: true}, Replacement},
		{"same IP other port (rebind)", Input{Remote: "127.0.0.2:6380", Retiring: old, Identifying: true}, Replacement},
		{"v4-mapped v6 equals v4", Input{Remote: "[::ffff:127.0.0.2]:6379", Retiring: old, Identifying: true}, Doomed},
		{"tunnel before release", Input{Remote: old, Retiring: old}, Unknown},
		{"tunnel after release", Input{Remote: old, Retiring: old, Released: true}, Replacement},
		{"tunnel elsewhere before release", Input{Remote: "127.0.0.9:1", Retiring: old}, Unknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Judge(c.in); got != c.want {
				t.Fatalf("Judge(%+v) = %v, want %v", c.in, got, c.want)
			}
		})
	}
}

func TestSameAddr(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"10.0.0.1:1", "10.0.0.1:1", true},
		{"10.0.0.1:1", "10.0.0.1:2", false},
		{"10.0.0.1:1", "10.0.0.2:1", false},
		{"[::1]:5", "[::1]:5", true},
		{"[::ffff:10.0.0.1]:5", "10.0.0.1:5", true},
		{"Redis.Example:5", "redis.example:5", true},
		{"", "", false},
		{"garbage", "garbage2", false},
		{"[fe80::1%eth0]:5", "[fe80::1]:5", true},
	}
	for _, c := range cases {
		if got := SameAddr(c.a, c.b); got != c.want {
			t.Errorf("SameAddr(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestIdentifiesNodes(t *testing.T) {
	cases := []struct {
		addr string
		saw  bool
		want bool
	}{
		{"redis.example:6379", false, true},
		{"10.0.0.1:6379", false, false},
		{"10.0.0.1:6379", true, true},
		{"[::1]:6379", false, false},
		{"nonsense", false, false},
	}
	for _, c := range cases {
		if got := IdentifiesNodes(c.addr, c.saw); got != c.want {
			t.Errorf("IdentifiesNodes(%q, %v) = %v, want %v", c.addr, c.saw, got, c.want)
		}
	}
}

func TestVerdictString(t *testing.T) {
	for v, s := range map[Verdict]string{Unknown: "unknown", Replacement: "replacement", Doomed: "doomed"} {
		if v.String() != s {
			t.Errorf("%d.String() = %q, want %q", v, v.String(), s)
		}
	}
}
