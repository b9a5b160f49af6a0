"""`xnode gateway`: the payer service clients publish through (XIP-49 3.3.1).

It answers PayerApi (xmtp.xmtpv4.payer_api): GetNodes lists the registry's enabled nodes, and
PublishClientEnvelopes signs each ClientEnvelope as a PayerEnvelope with the gateway's payer
key and forwards it to the topic's preferred originator (XIP-49 3.3.6)."""
