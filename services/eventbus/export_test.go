package eventbus

// Exported for the tests that read a stream straight from NATS.
const EnvelopeHeader = envelopeHeader

var OpenEnvelope = openEnvelope
