// gRPC mixserve.v1.TextGeneration (proto/mixserve/v1/generation.proto) over the shared API layer.
#pragma once

#include <grpcpp/grpcpp.h>

#include "mixserve/v1/generation.grpc.pb.h"
#include "server/api.h"
#include "server/auth.h"

namespace mixserve {

class TextGenerationService final : public v1::TextGeneration::Service {
 public:
  TextGenerationService(ModelHub& hub, const ApiKeys& keys) : hub_(hub), keys_(keys) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                        v1::TokenizeResponse* res) override;
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* res) override;

 private:
  grpc::Status authorize(grpc::ServerContext* ctx) const;
  ModelHub& hub_;
  const ApiKeys& keys_;
};

grpc::StatusCode grpc_code(ApiCode code);

}  // namespace mixserve
