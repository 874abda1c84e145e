//! Talking to the NATS server: the connection ([`connect`]), JetStream provisioning
//! ([`provision`]) and every subject the worker uses ([`subjects`]).

pub(crate) mod connect;
pub(crate) mod provision;
pub(crate) mod subjects;
