package discovery

// OneByOne makes p pread file by file, as where io_uring is unavailable.
func (p *PortStates) OneByOne() {
	if p.ring != nil {
		p.oneByOne()
	}
}

// Batched reports whether p reads through io_uring.
func (p *PortStates) Batched() bool { return p.ring != nil }
