package eventbus

// CoalescingSubjects is how many subjects have events queued or a sender
// running in the service's coalescer.
func (s *Service) CoalescingSubjects() int {
	s.mu.Lock()
	co := s.coalesce
	s.mu.Unlock()
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.queues)
}
