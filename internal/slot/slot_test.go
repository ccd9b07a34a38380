package slot

import "testing"

func TestCRC16CheckValue(t *testing.T) {
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16/XMODEM check value: %#x, want 0x31c3", got)
	}
}

// The slots Redis answers to CLUSTER KEYSLOT.
func TestOf(t *testing.T) {
	for key, want := range map[string]int{
		"foo":                  12182,
		"user1000":             Of("{user1000}.following"),
		"{user1000}.followers": Of("{user1000}.following"),
		"foo{}{bar}":           int(CRC16("foo{}{bar}") % N), // an empty tag hashes the whole key
		"foo{{bar}}zap":        Of("{bar"),                   // the tag is what lies before the first '}'
		"{}":                   int(CRC16("{}") % N),
		"":                     0,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
		if got := Of([]byte(key)); got != want {
			t.Errorf("Of([]byte(%q)) = %d, want %d", key, got, want)
		}
	}
}

func FuzzOf(f *testing.F) {
	f.Add("{user}.x")
	f.Add("a{b}c{d}")
	f.Fuzz(func(t *testing.T, key string) {
		s := Of(key)
		if s < 0 || s >= N {
			t.Fatalf("Of(%q) = %d out of range", key, s)
		}
		if s != Of([]byte(key)) {
			t.Fatalf("string and []byte disagree on %q", key)
		}
	})
}
