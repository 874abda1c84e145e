//! Talking to the NATS server: the connection ([`connect`]) and JetStream provisioning
//! ([`provision`]). Every subject comes from `chunk_model::wire::Subjects`.

pub(crate) mod connect;
pub(crate) mod provision;
