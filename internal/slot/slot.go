// Package slot computes Redis Cluster hash slots, for maint's routing of
// commands of moved slots and for the emulated cluster of mainttest.
package slot

// N is the number of hash slots of a Redis cluster.
const N = 16384

// table is the CRC16 (XMODEM: polynomial 0x1021, initial value 0) of every
// byte value, as Redis Cluster hashes keys.
var table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// CRC16 returns the CRC16/XMODEM of b.
func CRC16[K ~string | ~[]byte](b K) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^b[i]]
	}
	return crc
}

// Of returns the hash slot of key: the CRC16 of its hash tag (the bytes
// between the first '{' and the first '}' after it, when not empty) or of
// the whole key, modulo N.
func Of[K ~string | ~[]byte](key K) int {
	for s := 0; s < len(key); s++ {
		if key[s] != '{' {
			continue
		}
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e > s+1 {
					key = key[s+1 : e]
				}
				break
			}
		}
		break
	}
	return int(CRC16(key) % N)
}
