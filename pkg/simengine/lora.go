package simengine

// loraSlot is an adapter loaded in one of the engine's slots.
type loraSlot struct {
	name string
	// running counts the running requests that use it: an adapter in use
	// is never evicted.
	running int
}

// loraFits says whether a request with the adapter can run this step:
// the adapter is loaded, or a slot is free or holds an adapter no running
// request uses (which then goes, least recently used first).
func (e *Engine) loraFits(name string) bool {
	if len(e.loras) < e.cfg.MaxLoras {
		return true
	}
	for _, s := range e.loras {
		if s.name == name || s.running == 0 {
			return true
		}
	}
	return false
}

// useLoRA counts a request admitted with the adapter, loading it if it is
// not loaded (evicting the least recently used adapter no running request
// uses when every slot is taken; loraFits said there is one), and says
// whether it loaded it. The adapter becomes the most recently used.
func (e *Engine) useLoRA(name string) bool {
	for i, s := range e.loras {
		if s.name == name {
			s.running++
			e.loras = append(append(e.loras[:i:i], e.loras[i+1:]...), s)
			return false
		}
	}
	if len(e.loras) >= e.cfg.MaxLoras {
		for i, s := range e.loras {
			if s.running == 0 {
				e.loras = append(e.loras[:i:i], e.loras[i+1:]...)
				break
			}
		}
	}
	e.loras = append(e.loras, loraSlot{name: name, running: 1})
	return true
}

// doneLoRA counts a request with the adapter that stopped running
// (finished, cancelled, held or preempted); the adapter stays loaded.
func (e *Engine) doneLoRA(r *request) {
	if r.lora == "" {
		return
	}
	for i := range e.loras {
		if e.loras[i].name == r.lora && e.loras[i].running > 0 {
			e.loras[i].running--
			return
		}
	}
}

// LoadedLoRAs returns the adapters loaded in the engine's slots, least
// recently used first.
func (e *Engine) LoadedLoRAs() []string {
	if len(e.loras) == 0 {
		return nil
	}
	out := make([]string, len(e.loras))
	for i, s := range e.loras {
		out[i] = s.name
	}
	return out
}
