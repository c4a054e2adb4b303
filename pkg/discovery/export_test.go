package discovery

// OneByOne makes p pread file by file, as where io_uring is unavailable.
func (p *PortStates) OneByOne() {
	if p.ring != nil {
		p.oneByOne()
	}
}

// Batched reports whether p reads through io_uring.
func (p *PortStates) Batched() bool { return p.ring != nil }

// UseRing makes p read through io_uring whatever OpenPortStates chose; false
// when io_uring is unavailable here.
func (p *PortStates) UseRing() bool { return p.useRing() }
